// Applies migrations and reads the recorded schema version.
#ifndef SQLGROUP_STORE_MIGRATOR_H_
#define SQLGROUP_STORE_MIGRATOR_H_

#include <pqxx/connection>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "migrations.h"
#include "schema_skew.h"

namespace sqlgroup::store {

struct MigrateOutcome {
  int from_version = 0;
  int to_version = 0;
  std::vector<std::string> applied;  // file names, in order
  // The live members --force fenced (MemberVersion::Describe).
  std::vector<std::string> fenced;
};

struct ApplyOptions {
  // Apply a migration even when live members know too old a schema to
  // run against it: their sessions end in its transaction (FenceMembers).
  bool force = false;
  // How long to wait for live members that joined before schema 14 to
  // record their version (they do when told of the new schema) before
  // counting them as older members.
  absl::Duration wait_for_versions = absl::Seconds(7);
};

// The newest recorded version; 0 when the database has no sqlgroup schema.
absl::StatusOr<int> ReadSchemaVersion(pqxx::connection& conn);

// Applies every migration newer than the recorded version, each in its own
// transaction together with its version row, so a failure leaves the
// previous version intact. Safe to run concurrently from several processes
// (the version row serializes them) and twice (the second run is a no-op).
// Before each migration, the live members that know a schema older than
// its members_from: FAILED_PRECONDITION naming them, the migrations before
// it applied, unless `options.force`. FAILED_PRECONDITION also when the
// database is newer than `migrations`.
absl::StatusOr<MigrateOutcome> ApplyMigrations(
    pqxx::connection& conn, const std::vector<internal::Migration>& migrations,
    const ApplyOptions& options = {});

// The database's schema state when this binary may run against it
// (internal::CheckSkew with ThisBinary()); FAILED_PRECONDITION saying what
// to do otherwise. Checks the server's version first (CheckServerVersion).
absl::StatusOr<internal::SchemaState> CheckSchemaServed(pqxx::connection& conn);

// The oldest PostgreSQL major sqlgroup supports (and is tested on).
inline constexpr int kOldestSupportedMajor = 14;

// OK for a server_version_num (e.g. 150018) of a supported major;
// FAILED_PRECONDITION saying which versions are supported otherwise.
absl::Status CheckServerVersionNumber(int version_num);
absl::Status CheckServerVersion(pqxx::connection& conn);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_MIGRATOR_H_
