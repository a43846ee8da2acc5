#include "member/notification_router.h"

#include "absl/strings/match.h"
#include "store/notifications.h"

namespace sqlgroup {

void NotificationRouter::Route(const std::string& payload) const {
  if (payload == store::MembershipChanged(group_) ||
      payload == store::kPartsFreed) {
    sinks_.membership_changed();
  } else if (payload == store::ItemsArrived(group_)) {
    sinks_.items_arrived();
  } else if (const auto ranges = store::ParseItemsArrivedIn(group_, payload)) {
    sinks_.items_arrived_in(*ranges);
  } else if (const auto delay = store::ParseItemsDueIn(group_, payload)) {
    sinks_.items_due_in(*delay);
  } else if (store::IsSchemaChanged(payload)) {
    if (sinks_.schema_changed) sinks_.schema_changed();
  } else if (absl::StartsWith(payload, store::ItemsArrived(group_) + "#")) {
    // A form of announcement this version does not read (a newer
    // producer's): items came, somewhere.
    sinks_.items_arrived();
  }
}

}  // namespace sqlgroup
