// Lets the consumers of one process heartbeat their sessions together: one
// connection and one statement per heartbeat interval for all of them,
// instead of one each. For processes that run many members (one per tenant,
// per core, or a fleet of threads): 200 members in a process send one
// heartbeat statement a second instead of 200, and the database wakes one
// backend instead of 200.
//
//   auto shared = sqlgroup::SharedHeartbeat::Create({dsn});
//   if (!shared.ok()) return shared.status();
//   for (...) {
//     sqlgroup::ConsumerOptions options;
//     options.dsn = dsn;
//     options.shared_heartbeat = *shared;
//     ...
//   }
//
// What stays the same: every consumer still has its own session, control
// connection (membership, rebalancing, LISTEN) and workers, and a session
// lives only while its own consumer asks for its heartbeats: a consumer
// whose control thread hangs expires and is reaped like a process that
// hangs. What changes: heartbeats fall on a grid of the interval shared by
// the process (so that the members ask together), a statement waits up to
// 20 ms for every member to ask, and the process holds one more connection.
// Every reply also carries what a watched heartbeat does (the next expiry of
// the group's other sessions, a fingerprint of the live ones), read once per
// group and statement, so reaps are timed without extra queries; one member
// of the process reaps an expired session, not all. When the shared
// connection is down or a reply is late, a member heartbeats over its own
// control connection instead: no member's session depends on it.
//
// Thread safety: all methods from any thread. The object must outlive the
// consumers given it (they hold a shared_ptr).
#ifndef SQLGROUP_SHARED_HEARTBEAT_H_
#define SQLGROUP_SHARED_HEARTBEAT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sqlgroup/connection_budget.h"
#include "sqlgroup/pool_mode.h"

namespace sqlgroup {

struct SharedHeartbeatOptions {
  // The consumers' connection string: every consumer given this object must
  // use the same one.
  std::string dsn;
  // Bound on one connection attempt. >= 1 s. Default 5 s.
  absl::Duration connect_timeout = absl::Seconds(5);
  // As the consumers' (ConsumerOptions::pool_mode); kAuto finds out on the
  // connection Create opens.
  PoolMode pool_mode = PoolMode::kAuto;
  // Optional: the consumers' shared budget; the heartbeat's connection
  // keeps a slot of it (Create fails with RESOURCE_EXHAUSTED without one).
  std::shared_ptr<ConnectionBudget> connection_budget;
};

// Counters since Create().
struct SharedHeartbeatStats {
  int64_t statements = 0;  // heartbeat statements sent
  int64_t beats = 0;       // sessions heartbeated by them
  int64_t failures = 0;    // statements or connections that failed
};

class SharedHeartbeat {
 public:
  // Connects once to check the connection string (UNAVAILABLE naming the
  // target otherwise) and starts the thread that sends the statements.
  static absl::StatusOr<std::shared_ptr<SharedHeartbeat>> Create(
      SharedHeartbeatOptions options);
  virtual ~SharedHeartbeat() = default;

  virtual const std::string& dsn() const = 0;
  virtual SharedHeartbeatStats stats() const = 0;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_SHARED_HEARTBEAT_H_
