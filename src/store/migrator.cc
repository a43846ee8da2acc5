#include "store/migrator.h"

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "store/errors.h"

namespace sqlgroup::store {
namespace {

// pg_tables, not information_schema.tables, which hides tables the role
// has no privilege on: a role without grants must hear "permission
// denied", not "run sqlgroup migrate".
constexpr char kHasVersionTable[] =
    "SELECT count(*) FROM pg_catalog.pg_tables "
    "WHERE schemaname = 'sqlgroup' AND tablename = 'schema_migrations'";

constexpr char kBootstrap[] =
    "CREATE SCHEMA IF NOT EXISTS sqlgroup;"
    "CREATE TABLE IF NOT EXISTS sqlgroup.schema_migrations ("
    "  version integer PRIMARY KEY,"
    "  name text NOT NULL,"
    "  applied_at timestamptz NOT NULL DEFAULT clock_timestamp())";

// $1 version, $2 file name. Empty result: another migrator recorded it.
constexpr char kRecordVersion[] =
    "INSERT INTO sqlgroup.schema_migrations (version, name) VALUES ($1, $2) "
    "ON CONFLICT (version) DO NOTHING RETURNING version";

}  // namespace

absl::StatusOr<int> ReadSchemaVersion(pqxx::connection& conn) {
  return GuardOr<int>("read schema version", [&] {
    pqxx::nontransaction tx(conn);
    if (tx.exec1(kHasVersionTable)[0].as<int>() == 0) return 0;
    return tx
        .exec1(
            "SELECT coalesce(max(version), 0) FROM "
            "sqlgroup.schema_migrations")[0]
        .as<int>();
  });
}

absl::StatusOr<MigrateOutcome> ApplyMigrations(
    pqxx::connection& conn,
    const std::vector<internal::Migration>& migrations) {
  // Before anything is created: an old server gets no half a schema.
  if (absl::Status s = CheckServerVersion(conn); !s.ok()) return s;
  MigrateOutcome out;
  // Only when missing: CREATE SCHEMA IF NOT EXISTS still needs CREATE on
  // the database, which the schema's owner no longer needs once it exists.
  absl::Status s = Guard("create sqlgroup.schema_migrations", [&] {
    try {
      pqxx::work tx(conn);
      if (tx.exec1(kHasVersionTable)[0].as<int>() > 0) return;
      tx.exec(kBootstrap);
      tx.commit();
    } catch (const pqxx::unique_violation&) {
      // Two migrators created it at once; the other one won, which is fine.
    }
  });
  if (!s.ok()) return s;
  auto version = ReadSchemaVersion(conn);
  if (!version.ok()) return version.status();
  out.from_version = out.to_version = *version;
  const int known = static_cast<int>(migrations.size());
  if (*version > known) {
    return absl::FailedPreconditionError(
        absl::StrCat("the database's sqlgroup schema is version ", *version,
                     ", newer than this sqlgroup knows (", known,
                     "): upgrade the sqlgroup binary; nothing was changed"));
  }
  for (const internal::Migration& m : migrations) {
    if (m.version <= out.to_version) continue;
    bool applied = false;
    s = Guard(absl::StrCat("apply migration ", m.name), [&] {
      pqxx::work tx(conn);
      if (tx.exec_params(kRecordVersion, m.version, m.name).empty()) return;
      tx.exec(m.sql);
      tx.commit();
      applied = true;
    });
    if (!s.ok()) return s;
    out.to_version = m.version;
    if (applied) out.applied.push_back(m.name);
  }
  return out;
}

absl::Status CheckServerVersionNumber(int version_num) {
  if (version_num >= kOldestSupportedMajor * 10000) return absl::OkStatus();
  // server_version_num: major * 10000 + minor since 10; 9.6.24 was 90624.
  const std::string version =
      version_num >= 100000
          ? absl::StrCat(version_num / 10000, ".", version_num % 10000)
          : absl::StrCat(version_num / 10000, ".", version_num / 100 % 100, ".",
                         version_num % 100);
  return absl::FailedPreconditionError(absl::StrCat(
      "the server runs PostgreSQL ", version, "; sqlgroup needs PostgreSQL ",
      kOldestSupportedMajor,
      " or newer (tested on 14 to 18): upgrade the server, or point --dsn "
      "at one that is; nothing was changed"));
}

absl::Status CheckServerVersion(pqxx::connection& conn) {
  return CheckServerVersionNumber(conn.server_version());
}

absl::Status CheckSchemaVersion(pqxx::connection& conn, int expected) {
  if (absl::Status s = CheckServerVersion(conn); !s.ok()) return s;
  auto version = ReadSchemaVersion(conn);
  if (!version.ok()) return version.status();
  if (*version == expected) return absl::OkStatus();
  if (*version == 0) {
    return absl::FailedPreconditionError(
        "this database has no sqlgroup schema: run `sqlgroup migrate` "
        "(with the same --dsn) first");
  }
  if (*version < expected) {
    return absl::FailedPreconditionError(
        absl::StrCat("the database's sqlgroup schema is version ", *version,
                     ", older than this sqlgroup needs (", expected,
                     "): run `sqlgroup migrate`"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("the database's sqlgroup schema is version ", *version,
                   ", newer than this sqlgroup knows (", expected,
                   "): upgrade the sqlgroup binary"));
}

}  // namespace sqlgroup::store
