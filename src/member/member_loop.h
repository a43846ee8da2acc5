// The control thread of a member: registers and heartbeats its session,
// reaps expired sessions, and rebalances (drop what the assignment moved
// away, take what it gave and is free), waking on LISTEN/NOTIFY with
// periodic polling as the fallback. Work on the parts themselves is done by
// the PartWorkers through the PartScheduler.
//
// Member states: kJoining (no session) -> kActive -> kLeaving -> kLeft, and
// kActive -> kJoining when the session is lost. Thread safety: Run() on one
// thread; RequestStop() and the accessors from any thread.
#ifndef SQLGROUP_MEMBER_MEMBER_LOOP_H_
#define SQLGROUP_MEMBER_MEMBER_LOOP_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <pqxx/connection>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "member/heartbeat_batcher.h"
#include "member/lent_connection.h"
#include "member/part_scheduler.h"
#include "metrics.h"
#include "sqlgroup/connection_budget.h"
#include "sqlgroup/consumer.h"
#include "store/connection.h"
#include "store/member_store.h"
#include "wakeup.h"

namespace spdlog {
class logger;
}

namespace sqlgroup {

struct MemberConfig {
  std::string dsn;
  std::string group;
  store::SessionInfo session;
  absl::Duration rebalance_poll;            // when not listening
  absl::Duration rebalance_poll_listening;  // while LISTEN works
  // ConsumerOptions::drain_timeout and cut_off.
  absl::Duration drain_timeout;
  std::function<void(const std::string&, const std::vector<int>&)> cut_off;
  absl::Duration connect_timeout;
  bool use_notify = true;
  // ConsumerOptions::transaction_pooler and listen_dsn.
  bool transaction_pooler = false;
  std::string listen_dsn;
  // Null: the group's (GroupSettings::assignor).
  std::shared_ptr<const Assignor> assignor;
  RebalanceListener* listener = nullptr;
  // Heartbeats go through it, with those of the process's other members,
  // instead of over the control connection. Optional.
  std::shared_ptr<HeartbeatBatcher> shared_heartbeat;
  // The group's session TTL as last read, for the member's workers (whose
  // connections' idle-in-transaction limit is the TTL). Optional.
  std::shared_ptr<std::atomic<int64_t>> ttl_ns;
  // The group's ordering as last read (GroupSettings::key_order), for the
  // workers. Optional.
  std::shared_ptr<std::atomic<bool>> key_order;
  // The control connection as the workers borrow it, and the process's
  // connection budget (a slot is kept for the control connection).
  // Required.
  LentConnection* lent = nullptr;
  ConnectionBudget* budget = nullptr;
};

class MemberLoop {
 public:
  enum class Phase { kJoining, kActive, kLeaving, kLeft, kFailed };

  MemberLoop(MemberConfig config, store::GroupSettings settings,
             PartScheduler& scheduler, MemberMetrics& metrics,
             std::shared_ptr<spdlog::logger> logger);
  ~MemberLoop();

  // The thread body. Returns after a graceful leave, or when the member
  // cannot go on (see fatal()).
  void Run();
  void RequestStop();
  // Makes the stop that follows a leave for good: a static member deletes
  // its session (its parts move at once) instead of stepping away.
  void LeaveForGood() { leave_for_good_ = true; }
  bool IsStatic() const {
    return !config_.session.instance.empty() &&
           config_.session.static_timeout > absl::ZeroDuration();
  }

  std::string session_id() const;
  std::vector<int> owned_parts() const;
  // Why the member stopped on its own (e.g. the group was deleted).
  absl::Status fatal() const;
  Phase phase() const;

 private:
  class Listener;

  bool StopRequested() const;
  void SetPhase(Phase next);
  bool EnsureConnected();
  void Disconnect(const absl::Status& why);
  // The control connection's options for the group's current TTL, and
  // applying them to the open connection (after the TTL was altered).
  store::ConnectOptions ControlOptions() const;
  void FollowTtl();
  // Returns false when the loop must end (fatal error).
  bool Join();
  void Heartbeat();
  // The group's settings as just read (its TTL and heartbeat may have been
  // altered); the shared heartbeat learns of a new TTL.
  void Adopt(const store::GroupSettings& settings);
  // One heartbeat, over the shared heartbeat if there is one (then always
  // a watched one), else over the control connection.
  absl::StatusOr<std::optional<store::Beat>> SendHeartbeat(bool watch);
  // Deletes the group's expired sessions. Runs when the earliest expiry the
  // last view showed falls due, or at once when a view shows expired ones:
  // no reap query on every heartbeat.
  void Reap();
  void Rebalance();
  std::string RebalanceReason(const store::GroupView& view) const;
  void ChangeLayout(const store::GroupView& view, absl::Time now);
  // Releases the revoking parts whose handler calls have all returned,
  // and cuts off those of parts that waited drain_timeout.
  void FinishDrains();
  // Starts handing `part` over: no new work is handed out on it.
  void StartRevoke(int part, absl::Time now);
  // Records for describe that `parts` are being handed over (`revoking`)
  // or are not any more.
  void MarkRevoking(const std::vector<int>& parts, bool revoking);
  // Asks config_.cut_off to end the handler calls on `parts` under
  // `session`; with `say`, logs why and counts it (a first cut; the ones
  // after reach calls that began since).
  void CutOff(const std::string& session, const std::vector<int>& parts,
              const char* why, bool say);
  // Of `parts`, those a handler call (or a claim) runs on.
  std::vector<int> BusyOf(const std::vector<int>& parts) const;
  void LoseSession(const std::string& why);
  void Leave();
  void WaitForWork(absl::Time until);
  // Takes the control connection back from the workers (waiting for a
  // borrower's task to end) and restores its limits; false when a
  // borrower found it broken (it is dropped).
  bool TakeBack();
  // When TakeBack stops waiting for a borrower and goes on without the
  // connection: a heartbeat interval late, but a heartbeat's time before
  // the session would expire.
  absl::Time ReplaceControlAt() const;
  // A worker keeps the control connection past a heartbeat: leaves it to
  // the worker and opens another. False when it did not: no slot lent for
  // one, the connect failed, the connection came back meanwhile, or the
  // new one could not listen.
  bool ReplaceControl();
  // Without a connection to heartbeat on: through the shared heartbeat,
  // when the member has one (it needs no connection of the member's).
  void BeatWhileHeld();
  // One heartbeat through the shared heartbeat (which must be set).
  absl::StatusOr<std::optional<store::Beat>> SharedBeat();
  // `conn` (opened with `options`) is the control connection from now on:
  // lent to the workers, listening. False when it broke meanwhile.
  bool UseControl(std::unique_ptr<pqxx::connection> conn,
                  const store::ConnectOptions& options);
  struct Orphan;
  // Records the member's connections and budget for describe when they
  // changed, at most once per kConnectionsReport.
  void ReportConnections();
  // Lends the control connection to the workers for up to `timeout`, or
  // until a stop request (`wake_on_stop`), a worker giving it back broken
  // or with NOTIFYs, or (`sock` >= 0, the control connection's socket)
  // NOTIFYs arriving while nobody borrows it.
  void LendWhile(int sock, absl::Duration timeout, bool wake_on_stop = true);
  void SleepUnlessStopped(absl::Duration d);
  // Calls config_.listener's `callback` if there is a listener; logs what
  // it throws instead of letting it end the control thread.
  void CallListener(
      const char* name,
      void (RebalanceListener::*callback)(const std::vector<int>&),
      const std::vector<int>& parts);
  // LISTENs on this session's own channel (parts freed for it).
  void ListenForSession();
  // LISTENs on the group's channel (and the session's, once there is one)
  // when the member should and is not: on the control connection, or on
  // one to config_.listen_dsn. Failing, polls and tries again later.
  void StartListening();
  // Polls instead of listening (a LISTEN or its connection failed), and
  // says so once per episode.
  void StopListening(const absl::Status& why);
  // Where NOTIFYs arrive: the listen connection if there is one, else the
  // control connection.
  pqxx::connection& ListenConnection();
  // The sessions the last assignment gives `parts` to, this one excluded.
  std::vector<std::string> TargetsOf(const std::vector<int>& parts) const;
  // Heartbeats now if one is due; false when the member cannot go on with
  // its current session (lost, disconnected or failed).
  bool HeartbeatIfDue();
  void PublishOwned();
  // UNAVAILABLE drops the connection; NOT_FOUND of the group is fatal.
  void Handle(const absl::Status& s);

  const MemberConfig config_;
  PartScheduler& scheduler_;
  MemberMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;

  // Control thread only.
  store::GroupSettings settings_;
  std::unique_ptr<pqxx::connection> conn_;
  // To config_.listen_dsn, when there is one and it is open.
  std::unique_ptr<pqxx::connection> listen_conn_;
  int listen_failures_ = 0;  // in a row
  absl::Time next_listen_try_ = absl::InfinitePast();
  std::unique_ptr<Listener> listener_;          // the group's channel
  std::unique_ptr<Listener> session_listener_;  // this session's channel
  int connect_failures_ = 0;
  bool waiting_for_server_ = false;  // the last connect was refused: busy
  // The TTL the control connection's limits last followed (a borrower's
  // limits are undone silently).
  absl::Duration followed_ttl_ = absl::ZeroDuration();
  // What ReportConnections last recorded, for which session.
  std::string reported_session_;
  int reported_connections_ = -1;
  int reported_budget_ = -1;
  absl::Time next_connections_report_ = absl::InfinitePast();
  bool dropped_ = false;  // a connection was lost: say when one is back
  int join_failures_ = 0;
  std::string session_;
  absl::Time last_heartbeat_ok_;
  std::map<int, int64_t> local_;  // parts run, with epochs
  // The part count local_'s parts are numbered under: the group's, except
  // while a change of it drains them (ChangeLayout).
  int layout_parts_ = 0;
  bool resizing_ = false;  // a part-count change since the last target
  // Parts being handed over: when their revoke began, and whether their
  // handler calls were cut off. A part leaves local_ only once no handler
  // call on it runs (PartScheduler::Busy).
  struct Revoking {
    absl::Time since;
    bool cut_off = false;
  };
  std::map<int, Revoking> revoking_;
  Assignment assignment_;  // of the last membership read
  absl::BitGen jitter_;    // spreads the safety re-reads
  std::vector<int> last_target_;
  std::vector<std::string> last_live_;  // sessions at the last rebalance
  std::string last_membership_;         // GroupView::membership, the same
  bool reaped_since_rebalance_ = false;
  bool rejoined_after_loss_ = false;
  // This session took the place of its instance's earlier one (static).
  bool returned_ = false;
  std::map<std::string, std::string> last_static_;  // of the last rebalance
  // Why the target last changed (RebalanceReason): the label of the takes
  // that follow. "join" until the first change: a new member's own join.
  std::string rebalance_reason_ = "join";
  std::string assignor_name_;  // the group's, as last adopted
  std::optional<absl::Time> rebalance_started_;
  absl::Time next_heartbeat_;
  absl::Time next_rebalance_;
  // From when our heartbeats are watched ones: when the next other member
  // expires unless it heartbeats (the last watched heartbeat read it), a
  // TTL at the latest.
  absl::Time next_watch_ = absl::InfiniteFuture();
  bool reap_now_ = false;  // a watched heartbeat or the view saw an expiry
  // Whether a view that shows expired sessions makes this member reap:
  // always, unless the heartbeat is shared and its last reply named another
  // member of the process as the one to reap.
  bool may_reap_ = true;
  // Set by NOTIFYs, which a worker that borrowed the control connection
  // may dispatch.
  std::atomic<bool> rebalance_now_{true};

  Wakeup stop_wakeup_;  // signaled by RequestStop()
  std::atomic<bool> leave_for_good_{false};
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kJoining;
  std::string public_session_ ABSL_GUARDED_BY(mu_);
  std::vector<int> public_owned_ ABSL_GUARDED_BY(mu_);
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
};

const char* PhaseName(MemberLoop::Phase phase);

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_MEMBER_LOOP_H_
