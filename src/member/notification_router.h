// Reads the NOTIFY payloads a member hears (store/notifications.h) and says
// what each means for it: the membership changed (rebalance), items arrived
// somewhere or in given key ranges, items fall due later, or `sqlgroup
// migrate` changed the schema. Payloads of other groups, and forms this
// version does not know, are ignored, except a newer producer's form of
// "items arrived", which still wakes idle parts.
//
// Thread safety: Route() may run on any thread (a worker that borrowed the
// control connection dispatches what it reads); the sinks must allow that.
#ifndef SQLGROUP_MEMBER_NOTIFICATION_ROUTER_H_
#define SQLGROUP_MEMBER_NOTIFICATION_ROUTER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "keyspace.h"

namespace sqlgroup {

struct NotificationSinks {
  std::function<void()> membership_changed;  // or a part freed for us
  std::function<void()> items_arrived;       // somewhere in the group
  std::function<void(const std::vector<KeyRange>&)> items_arrived_in;
  std::function<void(absl::Duration)> items_due_in;
  // `sqlgroup migrate` changed the schema. Optional.
  std::function<void()> schema_changed;
};

class NotificationRouter {
 public:
  NotificationRouter(std::string group, NotificationSinks sinks)
      : group_(std::move(group)), sinks_(std::move(sinks)) {}

  void Route(const std::string& payload) const;

 private:
  const std::string group_;
  const NotificationSinks sinks_;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_NOTIFICATION_ROUTER_H_
