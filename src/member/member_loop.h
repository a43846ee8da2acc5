// The control thread of a member: registers and heartbeats its session,
// reaps expired sessions, and has the Rebalancer move toward the target
// (drop what the assignment moved away, take what it gave and is free),
// waking on LISTEN/NOTIFY (ControlChannel) with periodic polling as the
// fallback. Work on the parts themselves is done by the PartWorkers
// through the PartScheduler.
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
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "member/connections_report.h"
#include "member/control_channel.h"
#include "member/heartbeat_batcher.h"
#include "member/lent_connection.h"
#include "member/notification_router.h"
#include "member/part_scheduler.h"
#include "member/pg_control_channel.h"
#include "member/rebalancer.h"
#include "member/schema_watch.h"
#include "member/session_keeper.h"
#include "metrics.h"
#include "sqlgroup/connection_budget.h"
#include "sqlgroup/consumer.h"
#include "store/membership_store.h"
#include "store/model.h"
#include "wakeup.h"

namespace spdlog {
class logger;
}

namespace sqlgroup {

struct MemberConfig {
  std::string group;
  bool use_notify = true;
  store::SessionInfo session;
  absl::Duration rebalance_poll;            // when not listening
  absl::Duration rebalance_poll_listening;  // while LISTEN works
  // Null: the group's (GroupSettings::assignor).
  std::shared_ptr<const Assignor> assignor;
  // Heartbeats go through it, with those of the process's other members,
  // instead of over the control connection. Optional.
  std::shared_ptr<HeartbeatBatcher> shared_heartbeat;
  // The group's session TTL as last read, for the member's workers (whose
  // connections' idle-in-transaction limit is the TTL). Optional.
  std::shared_ptr<std::atomic<int64_t>> ttl_ns;
  // The group's ordering as last read (GroupSettings::key_order), for the
  // workers. Optional.
  std::shared_ptr<std::atomic<bool>> key_order;
  // The database's schema version as last read (SchemaWatch), for the
  // workers. Optional.
  std::shared_ptr<std::atomic<int>> schema_version;
  // The control connection and the LISTENs; its budget is also reported
  // for describe.
  ControlChannelConfig channel;
  // Handovers: drain_timeout, cut_off, the RebalanceListener.
  RebalancerConfig rebalance;
  // The database's schema as the consumer found it when it was created
  // (one this binary serves): whether sessions record versions.
  internal::SchemaState schema;
  // How often the schema is read again besides each join, reconnect and
  // `schema:N` notice (which a member without LISTEN, or one
  // reconnecting, does not hear).
  absl::Duration schema_check = absl::Seconds(5);
};

// What a member loop talks to the database through: its control channel
// and the statements it runs. Made by a factory once the loop exists (the
// channel hands NOTIFYs to the loop's router and waits on its stop
// request); the default is PostgreSQL's, unit tests hand in fakes.
struct MemberSeams {
  std::unique_ptr<ControlChannel> channel;
  std::unique_ptr<store::MembershipStore> store;
};
using MemberSeamsFactory = std::function<MemberSeams(
    const NotificationRouter& router, const Wakeup& stop)>;

class MemberLoop {
 public:
  enum class Phase { kJoining, kActive, kLeaving, kLeft, kFailed };

  MemberLoop(MemberConfig config, store::GroupSettings settings,
             PartScheduler& scheduler, MemberMetrics& metrics,
             std::shared_ptr<spdlog::logger> logger,
             const MemberSeamsFactory& seams = nullptr);
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
  bool StopRequested() const;
  void SetPhase(Phase next);
  // Opens the control connection if none is open; false (after a backoff)
  // when it could not.
  bool EnsureConnected();
  // Returns false when the loop must end (fatal error).
  bool Join();
  void Heartbeat();
  // The group's settings as just read (its TTL and heartbeat may have been
  // altered); the shared heartbeat learns of a new TTL.
  void Adopt(const store::GroupSettings& settings);
  // Deletes the group's expired sessions. Runs when the earliest expiry the
  // last view showed falls due, or at once when a view shows expired ones:
  // no reap query on every heartbeat.
  void Reap();
  // Reads the group and lets the rebalancer move toward its target.
  void Rebalance();
  void FinishDrains();
  // What the rebalancer asks of the loop's timing.
  void Follow(absl::StatusOr<Rebalancer::Again> again);
  void LoseSession(const std::string& why);
  void Leave();
  // Takes the control connection back from the workers; false when it is
  // gone.
  bool TakeBack();
  // Records the member's connections and budget for describe
  // (ConnectionsReport).
  void ReportConnections();
  void WaitForWork(absl::Time until);
  void SleepUnlessStopped(absl::Duration d);
  // Heartbeats now if one is due; false when the member cannot go on with
  // its current session (lost, disconnected or failed).
  bool HeartbeatIfDue();
  void PublishSession();
  // SchemaWatch::Check; stops the member (fatal) if this binary may not
  // run against the schema.
  void CheckSchema();
  // UNAVAILABLE drops the connection; NOT_FOUND of the group, a wrong
  // schema and a missing privilege are fatal.
  void Handle(const absl::Status& s);

  const MemberConfig config_;
  PartScheduler& scheduler_;
  MemberMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;

  Wakeup stop_wakeup_;  // signaled by RequestStop()
  // Set by NOTIFYs, which a worker that borrowed the control connection
  // may dispatch.
  std::atomic<bool> rebalance_now_{true};
  const NotificationRouter router_;
  MemberSeams seams_;
  ControlChannel& channel_;
  store::MembershipStore& store_;
  Rebalancer rebalancer_;
  SessionKeeper keeper_;
  const KeepAlive keep_alive_;
  SchemaWatch schema_;
  ConnectionsReport connections_;

  // Control thread only.
  store::GroupSettings settings_;
  std::string session_;
  int join_failures_ = 0;
  absl::BitGen jitter_;        // spreads the safety re-reads
  std::string assignor_name_;  // the group's, as last adopted
  absl::Time next_rebalance_;
  // A static member whose session was lost checks, before it joins again,
  // that no newer process took its instance.
  bool rejoined_after_loss_ = false;
  // Join waits for the calls of a lost session to return (said once).
  bool waiting_for_calls_ = false;

  std::atomic<bool> leave_for_good_{false};
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kJoining;
  std::string public_session_ ABSL_GUARDED_BY(mu_);
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
};

const char* PhaseName(MemberLoop::Phase phase);

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_MEMBER_LOOP_H_
