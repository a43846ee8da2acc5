// The operations on a group's items (sqlgroup/operations.h) on a facade's
// connection: each one call of its SQL function (sql/017_operate_items.sql,
// sql/018_retention_and_cancel.sql) in one transaction. Errors are sentences:
// NOT_FOUND (no such group or item), INVALID_ARGUMENT (a selection or value the
// function refused), FAILED_PRECONDITION (a schema without the function:
// migrate), PERMISSION_DENIED (naming the grant that allows it). Names no pqxx.
#ifndef SQLGROUP_STORE_OPERATIONS_STORE_H_
#define SQLGROUP_STORE_OPERATIONS_STORE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sqlgroup/operations.h"
#include "store/db_connection.h"

namespace sqlgroup::store {

absl::StatusOr<std::vector<DeadItem>> ListDead(DbConnection& db,
                                               const std::string& group,
                                               const DeadFilter& filter);
absl::StatusOr<DeadItem> ShowDead(DbConnection& db, const std::string& group,
                                  const std::string& id);
absl::StatusOr<std::vector<RequeuedItem>> RequeueDead(
    DbConnection& db, const std::string& group, const DeadSelection& selection,
    RequeuePosition position, bool dry_run);
absl::StatusOr<std::vector<DeadItem>> PurgeDead(DbConnection& db,
                                                const std::string& group,
                                                const DeadSelection& selection,
                                                bool dry_run);
absl::StatusOr<std::vector<WaitingItem>> ListItems(DbConnection& db,
                                                   const std::string& group,
                                                   const ItemFilter& filter);
absl::StatusOr<WaitingItem> ShowItem(DbConnection& db, const std::string& group,
                                     const std::string& id);
absl::StatusOr<std::vector<CancelledItem>> CancelItems(
    DbConnection& db, const std::string& group, const ItemSelection& selection,
    bool dry_run);
// Pauses (`pause`) or resumes the group, or its key `key`: whether that
// changed anything (false: it was paused, or not paused, already).
absl::StatusOr<bool> SetPaused(DbConnection& db, const std::string& group,
                               const std::optional<std::string>& key,
                               bool pause);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_OPERATIONS_STORE_H_
