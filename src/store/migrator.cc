#include "store/migrator.h"

#include <algorithm>
#include <optional>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "store/errors.h"
#include "store/member_store.h"
#include "store/member_versions.h"
#include "store/notifications.h"

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

// The members `m` would leave behind on a database at `db_version`, after
// giving those that joined before schema 14, and may record their version
// now, `wait` to do so.
absl::StatusOr<std::vector<MemberVersion>> MembersLeftBehind(
    pqxx::connection& conn, int db_version, const internal::Migration& m,
    absl::Duration wait) {
  auto older = MembersOlderThan(conn, db_version, m.members_from);
  if (!older.ok() || db_version < internal::kVersionsRecordedFrom) {
    return older;
  }
  const absl::Time deadline = absl::Now() + wait;
  auto unrecorded = [&] {
    return std::any_of(older->begin(), older->end(),
                       [](const MemberVersion& v) { return v.schema == 0; });
  };
  bool told = false;
  while (unrecorded() && absl::Now() < deadline) {
    if (!told) {
      // Members told before may have missed it (a reconnect): again.
      absl::Status s = Guard("tell members of the schema", [&] {
        pqxx::work tx(conn);
        Notify(tx, SchemaChanged(db_version));
        tx.commit();
      });
      if (!s.ok()) return s;
      told = true;
    }
    absl::SleepFor(absl::Milliseconds(100));
    older = MembersOlderThan(conn, db_version, m.members_from);
    if (!older.ok()) return older;
  }
  return older;
}

std::string LeftBehindError(const internal::Migration& m,
                            const MigrateOutcome& out,
                            const std::vector<MemberVersion>& members) {
  std::string text =
      absl::StrCat("not applying ", m.name, ": schema ", m.version,
                   " accepts only members that know schema ", m.members_from,
                   " or newer, and ", members.size(), " live member",
                   members.size() == 1 ? " does" : "s do", " not:");
  for (const MemberVersion& v : members) {
    absl::StrAppend(&text, "\n  ", v.Describe());
  }
  absl::StrAppend(
      &text, "\nStop or upgrade ", members.size() == 1 ? "it" : "them",
      " (docs/UPGRADING.md), then run `sqlgroup migrate` again; or run "
      "`sqlgroup migrate --force` to end the sessions named now (their "
      "parts move to the others, and those members take no more items).");
  if (!out.applied.empty()) {
    absl::StrAppend(
        &text, " Applied before stopping: ", absl::StrJoin(out.applied, ", "),
        " (schema ", out.to_version, "), which they can run against.");
  } else {
    absl::StrAppend(&text, " Nothing was changed.");
  }
  return text;
}

// What one migration's transaction did.
struct OneMigration {
  bool applied = false;  // false: another migrator had applied it
  std::vector<MemberVersion> fenced;
  // Older members found at the last look (without force): rolled back.
  std::optional<std::vector<MemberVersion>> refused;
};

// Each lock the migration waits for, at most this long (heartbeats queue
// behind a waiting ALTER or LOCK), and how often it is tried.
constexpr absl::Duration kLockWait = absl::Seconds(2);
constexpr int kLockAttempts = 15;

// Migration `m` in one transaction over a database at `from_version`.
absl::StatusOr<OneMigration> ApplyOne(pqxx::connection& conn,
                                      const internal::Migration& m,
                                      int from_version, bool force) {
  OneMigration one;
  absl::Status s = Guard(absl::StrCat("apply migration ", m.name), [&] {
    pqxx::work tx(conn);
    tx.exec(absl::StrCat("SET LOCAL lock_timeout = ",
                         absl::ToInt64Milliseconds(kLockWait)));
    // One migrator at a time, from before its version row: a second one
    // waits here, then finds the row and skips (a migration that alters
    // schema_migrations, as 14 does, would otherwise deadlock with a
    // second migrator's insert waiting on the row).
    tx.exec(
        "LOCK TABLE sqlgroup.schema_migrations IN SHARE ROW EXCLUSIVE MODE");
    if (tx.exec_params(kRecordVersion, m.version, m.name).empty()) return;
    tx.exec(m.sql);
    if (m.version >= internal::kVersionsRecordedFrom) {
      tx.exec_params(
          "UPDATE sqlgroup.schema_migrations SET members_from = $2 "
          "WHERE version = $1",
          m.version, m.members_from);
    }
    if (from_version > 0) {
      // The last look, with sessions held still until the commit: no
      // older member registers between it and the new schema.
      tx.exec("LOCK TABLE sqlgroup.sessions IN SHARE ROW EXCLUSIVE MODE");
      one.fenced = MembersOlderThan(tx, from_version, m.members_from);
      if (!one.fenced.empty() && !force) {
        one.refused = std::move(one.fenced);
        one.fenced.clear();
        return;  // rolled back
      }
      FenceMembers(tx, from_version, one.fenced);
    }
    Notify(tx, SchemaChanged(m.version));
    tx.commit();
    one.applied = true;
  });
  if (!s.ok()) return s;
  return one;
}

}  // namespace

absl::StatusOr<int> ReadSchemaVersion(pqxx::connection& conn) {
  auto state = ReadSchemaState(conn);
  if (!state.ok()) return state.status();
  return state->version;
}

absl::StatusOr<MigrateOutcome> ApplyMigrations(
    pqxx::connection& conn, const std::vector<internal::Migration>& migrations,
    const ApplyOptions& options) {
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
    auto behind =
        MembersLeftBehind(conn, out.to_version, m, options.wait_for_versions);
    if (!behind.ok()) return behind.status();
    if (!behind->empty() && !options.force) {
      return absl::FailedPreconditionError(LeftBehindError(m, out, *behind));
    }
    absl::StatusOr<OneMigration> one;
    for (int attempt = 1;; ++attempt) {
      one = ApplyOne(conn, m, out.to_version, options.force);
      if (one.ok() || !absl::IsAborted(one.status()) ||
          attempt == kLockAttempts) {
        break;
      }
      // A lock wait that timed out, a deadlock: the transaction rolled
      // back whole; try again.
      absl::SleepFor(
          std::min(absl::Milliseconds(100) * attempt, absl::Seconds(1)));
    }
    if (absl::IsAborted(one.status())) {
      return absl::AbortedError(absl::StrCat(
          one.status().message(), " (tried ", kLockAttempts,
          " times: running members' transactions kept the locks it needs, "
          "and each wait is cut at ",
          absl::FormatDuration(kLockWait),
          " so that their heartbeats never queue behind it; run `sqlgroup "
          "migrate` again)"));
    }
    if (!one.ok()) return one.status();
    if (one->refused) {
      return absl::FailedPreconditionError(
          LeftBehindError(m, out, *one->refused));
    }
    out.to_version = m.version;
    if (one->applied) {
      out.applied.push_back(m.name);
      for (const MemberVersion& v : one->fenced) {
        out.fenced.push_back(v.Describe());
      }
    }
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

absl::StatusOr<internal::SchemaState> CheckSchemaServed(
    pqxx::connection& conn) {
  if (absl::Status s = CheckServerVersion(conn); !s.ok()) return s;
  auto state = ReadSchemaState(conn);
  if (!state.ok()) return state.status();
  auto skew = internal::CheckSkew(*state, internal::ThisBinary());
  if (!skew.ok()) return skew.status();
  return *state;
}

}  // namespace sqlgroup::store
