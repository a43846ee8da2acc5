// The sqlgroup schema as a whole, on a facade's connection: its recorded
// version, migrating it (store/migrator.h does the work), and the
// privileges roles hold on it. Names no pqxx.
#ifndef SQLGROUP_STORE_SCHEMA_STORE_H_
#define SQLGROUP_STORE_SCHEMA_STORE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "migrations.h"
#include "schema_skew.h"
#include "sqlgroup/admin.h"
#include "store/db_connection.h"

namespace sqlgroup::store {

// The newest recorded version; 0 when the database has no sqlgroup schema.
absl::StatusOr<int> SchemaVersion(DbConnection& db);

// The schema's state when the server is supported and this binary may run
// against the schema (schema_skew.h); FAILED_PRECONDITION saying what to
// do otherwise.
absl::StatusOr<internal::SchemaState> CheckSchema(DbConnection& db);

// Applies every migration newer than the recorded version (see
// store::ApplyMigrations). FAILED_PRECONDITION when the database is newer
// than `migrations`, or live members could not run against a migration
// (unless options.force).
absl::StatusOr<MigrateResult> MigrateSchema(
    DbConnection& db, const std::vector<internal::Migration>& migrations,
    const sqlgroup::MigrateOptions& options);

// Runs `sql` (REVOKE and GRANT statements, grants.h) in one transaction,
// once it has checked that the connection's role owns every table and
// sequence of the schema and that each of `roles` exists. Otherwise runs
// nothing: PERMISSION_DENIED (not the owner) or NOT_FOUND (the first role
// missing), each saying what to do.
absl::Status GrantPrivileges(DbConnection& db,
                             const std::vector<std::string>& roles,
                             const std::string& sql);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_SCHEMA_STORE_H_
