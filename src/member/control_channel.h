// A member's channel to the coordination tables, as its control loop sees
// it: a control connection that is open or not, lent to the workers while
// the loop waits for work, and LISTENs whose NOTIFYs reach a
// NotificationRouter. PgControlChannel is the real one; unit tests of the
// loop hand in a fake. The loop decides; the channel keeps the
// connections and tells it, by statuses, what happened to them.
//
// Statuses: UNAVAILABLE (or UNKNOWN) means the control connection broke;
// the loop then calls Disconnect(). Thread safety: the control thread
// only.
#ifndef SQLGROUP_MEMBER_CONTROL_CHANNEL_H_
#define SQLGROUP_MEMBER_CONTROL_CHANNEL_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sqlgroup {

// What the channel needs of the member while a worker keeps the control
// connection: when to stop waiting for it and open another (replace_at),
// and a heartbeat that needs no connection of the member's (keep_alive,
// for a shared heartbeat; may do nothing).
struct KeepAlive {
  std::function<absl::Time()> replace_at;
  std::function<void()> keep_alive;
};

class ControlChannel {
 public:
  virtual ~ControlChannel() = default;

  // For log lines and the session's own channel (ListenForSession); empty
  // while the member has no session.
  virtual void SetSession(const std::string& session) = 0;
  // The group's session TTL: the control connection's limits follow it.
  virtual void SetTtl(absl::Duration ttl) = 0;

  virtual bool connected() const = 0;
  // Opens the control connection (and listens) if none is open. A failure
  // is logged; retry_delay() then says how long to wait before the next
  // attempt.
  virtual absl::Status Connect() = 0;
  virtual absl::Duration retry_delay() const = 0;
  // Closes the control and listen connections; `why` (unless OK) is logged.
  virtual void Disconnect(const absl::Status& why) = 0;

  // LISTENs on the group's channel (and the session's) when it should and
  // does not. Failing, polls and tries again later; drops the control
  // connection when a LISTEN on it found it broken.
  virtual void StartListening() = 0;
  // LISTENs on the session's own channel (parts freed for it).
  virtual absl::Status ListenForSession() = 0;
  // Forgets the session's channel (the session is gone).
  virtual void StopListeningForSession() = 0;
  // Whether NOTIFYs reach the member (else it polls).
  virtual bool listening() const = 0;

  // Takes the control connection back from the workers, waiting for a
  // borrower's task to end; a borrower that keeps it past
  // keep_alive.replace_at() is left with it, and the channel goes on with
  // a new connection (`may_replace` false: it waits). Restores the
  // control connection's limits. True when it goes on with a new
  // connection (NOTIFYs may have waited behind the handler: read the group
  // again); UNAVAILABLE when a worker found it broken.
  virtual absl::StatusOr<bool> TakeBack(const KeepAlive& keep_alive,
                                        bool may_replace) = 0;
  // Lends the control connection to the workers until `until`, a stop
  // request, a worker giving it back broken or with NOTIFYs, or NOTIFYs
  // arriving (`woken()` true after dispatching them), then takes it back.
  // True when it went on with a new connection (see TakeBack); the
  // failure of a statement on the control connection, if any.
  virtual absl::StatusOr<bool> WaitForWork(
      absl::Time until, const KeepAlive& keep_alive, bool may_replace,
      const std::function<bool()>& woken) = 0;
  // Lends the control connection for `timeout` while the member drains
  // (a stop request does not end it: the stop is what it drains for).
  virtual void LendForDrain(absl::Duration timeout) = 0;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_CONTROL_CHANNEL_H_
