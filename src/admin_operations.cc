// Admin's operations on a group's items (sqlgroup/operations.h): checks
// what a person may have typed wrong here, in words, and leaves the rest
// to the schema's functions (store/operations_store.h).
#include "absl/strings/str_cat.h"
#include "admin_impl.h"
#include "keyspace.h"
#include "sqlgroup/admin.h"
#include "store/operations_store.h"

namespace sqlgroup {
namespace {

absl::Status CheckIds(const std::vector<std::string>& ids) {
  for (const std::string& id : ids) {
    if (!ParseUuid(id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", id,
          "' is not an item id: ids are UUIDs such as "
          "b637b17a-f08a-ced8-6615-682f210837a0 (`sqlgroup dead list` and "
          "`sqlgroup items list` show them); nothing was changed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* RequeuePositionName(RequeuePosition position) {
  switch (position) {
    case RequeuePosition::kOriginal:
      return "original";
    case RequeuePosition::kTail:
      return "tail";
  }
  return "unknown";
}

absl::StatusOr<std::vector<DeadItem>> Admin::ListDead(
    const std::string& group, const DeadFilter& filter) {
  return store::ListDead(*impl_->conn, group, filter);
}

absl::StatusOr<DeadItem> Admin::ShowDead(const std::string& group,
                                         const std::string& id) {
  if (absl::Status s = CheckIds({id}); !s.ok()) return s;
  return store::ShowDead(*impl_->conn, group, id);
}

absl::StatusOr<std::vector<RequeuedItem>> Admin::RequeueDead(
    const std::string& group, const DeadSelection& selection,
    RequeuePosition position, bool dry_run) {
  if (selection.older_than) {
    return absl::InvalidArgumentError(
        "a requeue selects by ids, key, error or all, not by age; nothing "
        "was changed");
  }
  if (absl::Status s = CheckIds(selection.ids); !s.ok()) return s;
  return store::RequeueDead(*impl_->conn, group, selection, position, dry_run);
}

absl::StatusOr<std::vector<DeadItem>> Admin::PurgeDead(
    const std::string& group, const DeadSelection& selection, bool dry_run) {
  if (!selection.error.empty()) {
    return absl::InvalidArgumentError(
        "a purge selects by ids, key, age or all, not by error; nothing was "
        "changed");
  }
  if (absl::Status s = CheckIds(selection.ids); !s.ok()) return s;
  return store::PurgeDead(*impl_->conn, group, selection, dry_run);
}

absl::StatusOr<std::vector<WaitingItem>> Admin::ListItems(
    const std::string& group, const ItemFilter& filter) {
  return store::ListItems(*impl_->conn, group, filter);
}

absl::StatusOr<WaitingItem> Admin::ShowItem(const std::string& group,
                                            const std::string& id) {
  if (absl::Status s = CheckIds({id}); !s.ok()) return s;
  return store::ShowItem(*impl_->conn, group, id);
}

absl::StatusOr<std::vector<CancelledItem>> Admin::CancelItems(
    const std::string& group, const ItemSelection& selection, bool dry_run) {
  if (absl::Status s = CheckIds(selection.ids); !s.ok()) return s;
  return store::CancelItems(*impl_->conn, group, selection, dry_run);
}

absl::StatusOr<bool> Admin::PauseGroup(const std::string& group,
                                       const std::optional<std::string>& key) {
  return store::SetPaused(*impl_->conn, group, key, /*pause=*/true);
}

absl::StatusOr<bool> Admin::ResumeGroup(const std::string& group,
                                        const std::optional<std::string>& key) {
  return store::SetPaused(*impl_->conn, group, key, /*pause=*/false);
}

}  // namespace sqlgroup
