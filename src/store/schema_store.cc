#include "store/schema_store.h"

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grants.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/migrator.h"

namespace sqlgroup::store {
namespace {

// Whether the connection's role owns (or is a member of the owner of)
// every table and sequence of the schema, and its name. A GRANT or REVOKE
// by a role without the right only warns, so this is checked first.
constexpr char kOwnsSchema[] =
    "SELECT coalesce(bool_and(pg_has_role(c.relowner, 'USAGE')), false), "
    "  current_user FROM pg_catalog.pg_class c "
    "WHERE c.relnamespace = 'sqlgroup'::regnamespace "
    "AND c.relkind IN ('r', 'S')";

// $1 role name. A row when the role exists.
constexpr char kRoleExists[] =
    "SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1";

}  // namespace

absl::StatusOr<int> SchemaVersion(DbConnection& db) {
  return ReadSchemaVersion(PqxxOf(db));
}

absl::StatusOr<internal::SchemaState> CheckSchema(DbConnection& db) {
  return CheckSchemaServed(PqxxOf(db));
}

absl::StatusOr<MigrateResult> MigrateSchema(
    DbConnection& db, const std::vector<internal::Migration>& migrations,
    const sqlgroup::MigrateOptions& options) {
  ApplyOptions apply;
  apply.force = options.force;
  absl::StatusOr<MigrateOutcome> outcome =
      ApplyMigrations(PqxxOf(db), migrations, apply);
  if (!outcome.ok()) return outcome.status();
  return MigrateResult{outcome->from_version, outcome->to_version,
                       outcome->applied, outcome->fenced};
}

absl::Status GrantPrivileges(DbConnection& db,
                             const std::vector<std::string>& roles,
                             const std::string& sql) {
  std::string missing, not_owner;
  absl::Status s;
  // A grant that writes policies (schema 19) locks their tables: with a
  // short lock_timeout it waits for the members' transactions briefly, and
  // a deadlock with one of them or a timeout is tried again.
  for (int attempt = 1; attempt <= 10; ++attempt) {
    s = Guard("grant", [&] {
      pqxx::work tx(PqxxOf(db));
      tx.exec("SET LOCAL lock_timeout = '2s'");
      const pqxx::row owner = tx.exec1(kOwnsSchema);
      if (!owner[0].as<bool>()) {
        not_owner = owner[1].as<std::string>();
        return;
      }
      for (const std::string& role : roles) {
        if (tx.exec_params(kRoleExists, role).empty()) {
          missing = role;
          return;
        }
      }
      tx.exec(sql);
      tx.commit();
    });
    if (!absl::IsAborted(s)) break;
    absl::SleepFor(absl::Milliseconds(100 * attempt));
  }
  if (!s.ok()) return s;
  if (!not_owner.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "permission denied: role '", not_owner,
        "' does not own the sqlgroup schema's tables; grant as the role that "
        "ran `sqlgroup migrate`, or as a superuser"));
  }
  if (!missing.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "role '", missing, "' does not exist; create it first (CREATE ROLE ",
        internal::QuoteIdentifier(missing),
        " LOGIN PASSWORD '...'), then grant again; nothing was changed"));
  }
  return absl::OkStatus();
}

}  // namespace sqlgroup::store
