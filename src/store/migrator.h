// Applies migrations and reads the recorded schema version.
#ifndef SQLGROUP_STORE_MIGRATOR_H_
#define SQLGROUP_STORE_MIGRATOR_H_

#include <pqxx/connection>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "migrations.h"

namespace sqlgroup::store {

struct MigrateOutcome {
  int from_version = 0;
  int to_version = 0;
  std::vector<std::string> applied;  // file names, in order
};

// The newest recorded version; 0 when the database has no sqlgroup schema.
absl::StatusOr<int> ReadSchemaVersion(pqxx::connection& conn);

// Applies every migration newer than the recorded version, each in its own
// transaction together with its version row, so a failure leaves the
// previous version intact. Safe to run concurrently from several processes
// (the version row serializes them) and twice (the second run is a no-op).
// FAILED_PRECONDITION when the database is newer than `migrations`.
absl::StatusOr<MigrateOutcome> ApplyMigrations(
    pqxx::connection& conn, const std::vector<internal::Migration>& migrations);

// OK when the recorded version is exactly `expected`; FAILED_PRECONDITION
// with what to run otherwise. Checks the server's version first
// (CheckServerVersion).
absl::Status CheckSchemaVersion(pqxx::connection& conn, int expected);

// The oldest PostgreSQL major sqlgroup supports (and is tested on).
inline constexpr int kOldestSupportedMajor = 14;

// OK for a server_version_num (e.g. 150018) of a supported major;
// FAILED_PRECONDITION saying which versions are supported otherwise.
absl::Status CheckServerVersionNumber(int version_num);
absl::Status CheckServerVersion(pqxx::connection& conn);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_MIGRATOR_H_
