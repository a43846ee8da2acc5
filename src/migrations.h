// The schema migrations: numbered SQL files (sql/NNN_name.sql), compiled
// into the library and optionally read from a folder instead. Pure file and
// name handling; applying them is store/migrator.h's job.
#ifndef SQLGROUP_MIGRATIONS_H_
#define SQLGROUP_MIGRATIONS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sqlgroup::internal {

struct MigrationSource {
  std::string name;  // "001_init.sql"
  std::string sql;
};

struct Migration {
  int version = 0;  // 1 for 001_init.sql
  std::string name;
  std::string sql;
  // The oldest schema a member may know and still run against this one
  // (schema_skew.h): the file's "-- members-from: N" line, which every
  // migration from schema 14 on must have; its own version before.
  int members_from = 0;
};

// The files of sql/ at build time, in order (generated code).
const std::vector<MigrationSource>& EmbeddedMigrations();

// Checks names and numbering: versions must run 1, 2, 3... with no gap or
// duplicate. From schema 14 on, each file must say "-- members-from: N",
// N no newer than the file and no older than the previous file's.
// INVALID_ARGUMENT names the offending file.
absl::StatusOr<std::vector<Migration>> ParseMigrations(
    const std::vector<MigrationSource>& sources);

// Reads every NNN_*.sql file of `dir`. NOT_FOUND when `dir` is missing or
// holds no migration.
absl::StatusOr<std::vector<MigrationSource>> ReadMigrationDir(
    const std::string& dir);

// The newest version this binary knows.
int LatestKnownVersion();

}  // namespace sqlgroup::internal

#endif  // SQLGROUP_MIGRATIONS_H_
