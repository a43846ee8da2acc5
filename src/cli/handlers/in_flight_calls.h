// The handler calls that `consume` has in flight, by the take they run
// under (the member's session and the item's part), so that they can be
// ended early: when a revoke or a stop has waited --drain_timeout for them
// (ConsumerOptions::cut_off), when the member lost its session, and at a
// second stop signal. A call cut off ends as one that timed out does: the
// exec handler's process is killed (and started again for the next item),
// the HTTP request abandoned (within a second), a demo sleep cut short.
// Its item is retried after the backoff, with the attempt counted.
//
//   auto calls = std::make_shared<InFlightCalls>();
//   Handler h = Interruptible(MakeExecHandler(...), calls);
//   options.cut_off = [calls](const std::string& session,
//                             const std::vector<int>& parts) {
//     calls->CutOff(session, parts);
//   };
//
// Thread safety: all methods are safe to call from any thread.
#ifndef SQLGROUP_CLI_HANDLERS_IN_FLIGHT_CALLS_H_
#define SQLGROUP_CLI_HANDLERS_IN_FLIGHT_CALLS_H_

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "sqlgroup/item.h"

namespace sqlgroup::cli {

class InFlightCalls {
 public:
  // The calling thread's handler call on an item of `part` claimed under
  // `session`, registered for its scope (`calls` null: a call nothing can
  // cut off).
  class Call {
   public:
    Call(InFlightCalls* calls, std::string session, int part);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    // The call in progress on this thread, or null.
    static const Call* Current();
    // Set once the call is cut off: the handler should end it now.
    const std::atomic<bool>& cut() const { return cut_; }

   private:
    friend class InFlightCalls;
    InFlightCalls* const calls_;
    const std::string session_;
    const int part_;
    std::atomic<bool> cut_{false};
    const Call* const outer_;  // the thread's call around this one, if any
  };

  // Cuts off the calls in flight on `parts` under `session`; returns how
  // many were not cut off already.
  int CutOff(const std::string& session, const std::vector<int>& parts);
  // Cuts off every call in flight; returns how many were not cut off
  // already.
  int CutOffAll();

 private:
  absl::Mutex mu_;
  std::set<Call*> calls_ ABSL_GUARDED_BY(mu_);
};

// The message of a call that was cut off (absl::CancelledError).
absl::Status CutOffError(const std::string& what);

// Whether the current thread's handler call has been cut off.
bool CutOffNow();

// `handler`, each call registered in `calls` under its item's part, so
// that it can be cut off. `calls` null: `handler` itself.
Handler Interruptible(Handler handler, std::shared_ptr<InFlightCalls> calls);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_HANDLERS_IN_FLIGHT_CALLS_H_
