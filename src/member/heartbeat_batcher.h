// The SharedHeartbeat behind the public interface: members ask for their
// session's heartbeat (Beat), and one thread sends the requests that
// gathered as one statement (store::HeartbeatMany) on its own connection.
// A batch goes once every attached member has asked, or kGather after the
// first request, whichever is sooner; requests that arrive while a
// statement runs go in the next one.
//
// Thread safety: all methods from any thread.
#ifndef SQLGROUP_MEMBER_HEARTBEAT_BATCHER_H_
#define SQLGROUP_MEMBER_HEARTBEAT_BATCHER_H_

#include <memory>
#include <optional>
#include <pqxx/connection>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sqlgroup/shared_heartbeat.h"
#include "store/connection.h"
#include "store/member_store.h"

namespace sqlgroup {

class HeartbeatBatcher : public SharedHeartbeat {
 public:
  // The longest a batch waits for members that have not asked yet.
  static constexpr absl::Duration kGather = absl::Milliseconds(20);

  explicit HeartbeatBatcher(SharedHeartbeatOptions options);
  ~HeartbeatBatcher() override;

  const std::string& dsn() const override { return options_.dsn; }
  SharedHeartbeatStats stats() const override;

  // A member that will ask for heartbeats from now on (with its group's
  // TTL: the shortest attached bounds how long a statement may take), and
  // one that will no longer ask (with the TTL it attached with): a batch
  // goes at once when every attached member asked.
  void Attach(absl::Duration ttl);
  void Detach(absl::Duration ttl);

  // Heartbeats `session` (of `group`) in the next statement and returns
  // what store::Heartbeat would with watch on: nullopt when the session is
  // lost. Of the sessions of one group in a statement, only the first to
  // ask is told when the next other session expires (the others see an
  // infinite next_expiry), so one member reaps, not all. UNAVAILABLE when
  // the connection failed (or cannot be had), DEADLINE_EXCEEDED when no
  // reply came by `deadline` (then the request is withdrawn unless it is
  // already being sent), and the statement's own error otherwise.
  absl::StatusOr<std::optional<store::Beat>> Beat(const std::string& group,
                                                  const std::string& session,
                                                  absl::Time deadline);

  // The first point after `t` of the grid of `interval` that every member
  // of the process shares (multiples of it since the Unix epoch, shifted by
  // this process's random phase), so that members with the same interval
  // ask together.
  absl::Time NextSlot(absl::Time t, absl::Duration interval) const;
  static absl::Time NextSlot(absl::Time t, absl::Duration interval,
                             absl::Duration phase);

 private:
  struct Request {
    std::string group;
    std::string session;
    bool done = false;
    absl::StatusOr<std::optional<store::Beat>> result;
  };
  using Batch = std::vector<std::shared_ptr<Request>>;

  void Run();
  // Sends one statement for `batch` and fills in its results.
  void Send(const Batch& batch);
  // False with the reason in `why` while no connection can be had (after a
  // failure, not again before a backoff).
  bool EnsureConnected(absl::Status* why);
  // Of the shared connection, for members with `ttl`.
  store::ConnectOptions Options(absl::Duration ttl) const;
  bool BatchReady() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SharedHeartbeatOptions options_;
  const absl::Duration phase_;
  std::unique_ptr<pqxx::connection> conn_;  // the sending thread's
  int connect_failures_ = 0;                // the sending thread's
  absl::Time next_connect_;                 // the sending thread's
  absl::Status last_connect_error_;         // the sending thread's
  store::ConnectionTimeouts timeouts_;      // the sending thread's: conn_'s

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::multiset<absl::Duration> ttls_ ABSL_GUARDED_BY(mu_);  // attached
  Batch pending_ ABSL_GUARDED_BY(mu_);
  absl::Time first_pending_ ABSL_GUARDED_BY(mu_);
  SharedHeartbeatStats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_HEARTBEAT_BATCHER_H_
