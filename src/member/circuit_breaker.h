// Stops a member from spending its items on a handler that fails them all:
// an endpoint that is down or answers 5xx to everything, a SQL function
// whose table or grant is missing, an exec process that keeps exiting.
// After `trip_after` failures in a row that say nothing of their items
// (IsOutageFailure), over at least two items, the circuit opens: no item is
// handed to the handler for `first_wait`; then one item is (half-open, the
// probe). Its success closes the circuit; its failure opens it again for
// twice as long, up to `max_wait`. A success, or a failure that is the
// item's own (a dead-letter verdict, a handler's "retry", a 4xx), resets
// the count. So an outage costs each member a few calls and no dead
// letters, and the member finds out within `max_wait` that it is over.
//
//   CircuitBreaker breaker({});
//   if (breaker.Admit(now) == Admission::kDenied) { /* leave it for later */ }
//   ... run the handler ...
//   if (auto change = breaker.Record(now, status, item.id)) { /* say so */ }
//
// Pure: no clock of its own, no database. Thread safety: all methods are
// safe to call from any thread.
#ifndef SQLGROUP_MEMBER_CIRCUIT_BREAKER_H_
#define SQLGROUP_MEMBER_CIRCUIT_BREAKER_H_

#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sqlgroup {

// Whether a handler's failure says that what it depends on is down or
// misconfigured (UNAVAILABLE, DEADLINE_EXCEEDED, FAILED_PRECONDITION,
// PERMISSION_DENIED, RESOURCE_EXHAUSTED: a refused connection, a 5xx or
// 429, a timeout, a wrong URL or credentials, a missing table, function or
// grant), not that the item is bad. A dead-letter verdict (item.h) is the
// item's own.
bool IsOutageFailure(const absl::Status& status);

class CircuitBreaker {
 public:
  struct Options {
    int trip_after = 5;  // outage failures in a row, over >= 2 items
    absl::Duration first_wait = absl::Seconds(1);
    absl::Duration max_wait = absl::Seconds(30);
  };
  enum class State { kClosed, kOpen, kHalfOpen };
  // kProbe: admitted as the one call that tries the dependency again.
  enum class Admission { kDenied, kAdmitted, kProbe };

  // A change of state, for the caller to say and to act on.
  struct Change {
    State to = State::kClosed;
    // kOpen: no item before this. kClosed: how long it was not closed.
    absl::Time open_until;
    absl::Duration was_open;
    int failures = 0;    // kOpen: outage failures in a row so far
    std::string error;   // kOpen: the last one's message
    bool first = false;  // kOpen: the episode's first opening
  };

  explicit CircuitBreaker(Options options) : options_(options) {}

  // Before a handler call: whether it may run now. Closed: admitted. Open:
  // denied, until open_until. Half-open: one call at a time is the probe,
  // the others are denied.
  Admission Admit(absl::Time now);
  // After an admitted call, its outcome (`status` OK: it succeeded); a
  // CANCELLED one (cut off) counts for nothing. Returns the change of
  // state it made, if any.
  std::optional<Change> Record(absl::Time now, const absl::Status& status,
                               const std::string& item_id);
  // A call admitted in half-open state ended without an outcome (the item
  // was not handled after all): another may probe.
  void Abandon();

  State state(absl::Time now) const;
  absl::Time open_until() const;
  // Before when no call would be admitted, as of `now`: InfinitePast when
  // closed, open_until while open, InfiniteFuture while a probe is out.
  absl::Time NoCallBefore(absl::Time now) const;

 private:
  // Opens (again) for `wait`; the change to report.
  Change Open(absl::Time now, absl::Duration wait, const absl::Status& status,
              bool first) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  int failures_ ABSL_GUARDED_BY(mu_) = 0;        // outage failures in a row
  std::string first_item_ ABSL_GUARDED_BY(mu_);  // of those failures
  bool two_items_ ABSL_GUARDED_BY(mu_) = false;  // over more than one item
  bool open_ ABSL_GUARDED_BY(mu_) = false;  // not closed (open or half-open)
  absl::Time open_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time opened_at_ ABSL_GUARDED_BY(mu_);
  absl::Duration wait_ ABSL_GUARDED_BY(mu_);
  bool probing_ ABSL_GUARDED_BY(mu_) = false;  // a half-open call is out
};

const char* CircuitStateName(CircuitBreaker::State state);

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_CIRCUIT_BREAKER_H_
