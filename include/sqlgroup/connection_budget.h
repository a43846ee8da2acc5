// A bound on the database connections of one process's consumers.
//
// A PostgreSQL server takes max_connections clients (100 by default), and a
// fleet that takes them all locks everyone else out. Each consumer holds
// one connection while idle (its control connection, which is also lent to
// its workers between the control thread's rounds) and opens worker
// connections only while its parts have work, within its budget; workers
// close theirs after ConsumerOptions::idle_connection_timeout without work.
// Give several consumers of a process (and their SharedHeartbeat) one
// budget to bound them together:
//
//   auto budget = sqlgroup::ConnectionBudget::Create(8);
//   options.connection_budget = *budget;   // for each consumer
//
// The budget counts connections to the consumers' dsn: the optional
// listen_dsn connection of each consumer is not in it.
//
// Thread safety: all methods from any thread.
#ifndef SQLGROUP_CONNECTION_BUDGET_H_
#define SQLGROUP_CONNECTION_BUDGET_H_

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sqlgroup {

class ConnectionBudget {
 public:
  // The largest budget a process may ask for.
  static constexpr int kMaxLimit = 10000;

  // INVALID_ARGUMENT unless 1 <= max_connections <= kMaxLimit.
  static absl::StatusOr<std::shared_ptr<ConnectionBudget>> Create(
      int max_connections);

  int limit() const { return limit_; }

  // For consumers and shared heartbeats. A slot kept for a connection its
  // holder needs for its whole life (a control or heartbeat connection,
  // open or reconnecting): false when every slot is kept or taken.
  bool Reserve();
  void Unreserve();
  // A slot for a worker's connection, if one is neither kept nor taken
  // now, or frees up within `wait`.
  bool TryAcquire(absl::Duration wait = absl::ZeroDuration());
  void Release();
  // Slots not kept: what workers may ever use (0: they borrow).
  int worker_slots() const;
  // Whether a worker waits for a slot now: an idle holder gives its up.
  bool contended() const;

  explicit ConnectionBudget(int limit) : limit_(limit) {}

 private:
  bool HasFreeSlot() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return reserved_ + acquired_ < limit_;
  }

  const int limit_;
  mutable absl::Mutex mu_;
  int reserved_ ABSL_GUARDED_BY(mu_) = 0;
  int acquired_ ABSL_GUARDED_BY(mu_) = 0;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_CONNECTION_BUDGET_H_
