#include "member/member_loop.h"

#include <poll.h>

#include <algorithm>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/random/distributions.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "keyspace.h"
#include "member/backoff.h"
#include "member/rebalance_plan.h"
#include "spdlog/spdlog.h"
#include "store/connection.h"
#include "store/errors.h"

namespace sqlgroup {
namespace {

constexpr absl::Duration kDrainCheck = absl::Milliseconds(10);
// How often the control thread looks at its connection's socket again
// while a worker has borrowed it.
constexpr absl::Duration kBorrowedPoll = absl::Milliseconds(20);
// A member's connections are recorded for describe at most this often.
constexpr absl::Duration kConnectionsReport = absl::Seconds(1);
// The ownership log keeps a day of history. It grows only when membership
// changes, so it is trimmed at one of those: each join.
constexpr absl::Duration kOwnershipHistory = absl::Hours(24);
constexpr int kPruneBatch = 10000;

std::string Parts(const std::vector<int>& parts) {
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

std::vector<int> Keys(const std::map<int, int64_t>& m) {
  std::vector<int> keys;
  for (const auto& [k, v] : m) keys.push_back(k);
  return keys;
}

}  // namespace

const char* PhaseName(MemberLoop::Phase phase) {
  switch (phase) {
    case MemberLoop::Phase::kJoining:
      return "joining";
    case MemberLoop::Phase::kActive:
      return "active";
    case MemberLoop::Phase::kLeaving:
      return "leaving";
    case MemberLoop::Phase::kLeft:
      return "left";
    case MemberLoop::Phase::kFailed:
      return "failed";
  }
  return "?";
}

// Routes NOTIFYs on the control connection to the loop: those of the
// channel every member hears, and those addressed to this session.
class MemberLoop::Listener : public pqxx::notification_receiver {
 public:
  Listener(pqxx::connection& conn, const std::string& channel, MemberLoop* loop)
      : pqxx::notification_receiver(conn, channel), loop_(loop) {}
  void operator()(const std::string& payload, int) override {
    if (payload == store::MembershipChanged(loop_->config_.group) ||
        payload == store::kPartsFreed) {
      loop_->rebalance_now_ = true;
    } else if (payload == store::ItemsArrived(loop_->config_.group)) {
      loop_->scheduler_.WakeIdle();
    } else if (const auto ranges =
                   store::ParseItemsArrivedIn(loop_->config_.group, payload)) {
      loop_->scheduler_.WakeParts(*ranges);
    } else if (const auto delay =
                   store::ParseItemsDueIn(loop_->config_.group, payload)) {
      loop_->scheduler_.ExpectAt(absl::Now() + *delay);
    } else if (absl::StartsWith(
                   payload, store::ItemsArrived(loop_->config_.group) + "#")) {
      // A form of announcement this version does not read (a newer
      // producer's): items came, somewhere.
      loop_->scheduler_.WakeIdle();
    }
  }

 private:
  MemberLoop* const loop_;
};

MemberLoop::MemberLoop(MemberConfig config, store::GroupSettings settings,
                       PartScheduler& scheduler, MemberMetrics& metrics,
                       std::shared_ptr<spdlog::logger> logger)
    : config_(std::move(config)),
      scheduler_(scheduler),
      metrics_(metrics),
      log_(std::move(logger)),
      settings_(settings) {}

MemberLoop::~MemberLoop() {
  // Before the connection they are registered with.
  session_listener_.reset();
  listener_.reset();
}

void MemberLoop::RequestStop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  stop_wakeup_.Signal();
}

bool MemberLoop::StopRequested() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

std::string MemberLoop::session_id() const {
  absl::MutexLock lock(&mu_);
  return public_session_;
}

std::vector<int> MemberLoop::owned_parts() const {
  absl::MutexLock lock(&mu_);
  return public_owned_;
}

absl::Status MemberLoop::fatal() const {
  absl::MutexLock lock(&mu_);
  return fatal_;
}

MemberLoop::Phase MemberLoop::phase() const {
  absl::MutexLock lock(&mu_);
  return phase_;
}

void MemberLoop::SetPhase(Phase next) {
  absl::MutexLock lock(&mu_);
  if (phase_ == next) return;
  log_->info("group={} session={} member {} -> {}", config_.group, session_,
             PhaseName(phase_), PhaseName(next));
  phase_ = next;
  public_session_ = session_;
}

void MemberLoop::PublishOwned() {
  metrics_.Owned(session_, local_);
  metrics_.PartsRevoking(static_cast<int>(revoking_.size()));
  std::vector<int> owned = Keys(local_);
  absl::MutexLock lock(&mu_);
  public_owned_ = std::move(owned);
  public_session_ = session_;
}

void MemberLoop::Run() {
  // Attached for as long as this member may ask for heartbeats, so a batch
  // waits for it.
  if (config_.shared_heartbeat) config_.shared_heartbeat->Attach(settings_.ttl);
  absl::Cleanup detach = [this] {
    if (config_.shared_heartbeat)
      config_.shared_heartbeat->Detach(settings_.ttl);
  };
  while (!StopRequested()) {
    if (phase() == Phase::kFailed) break;
    if (!TakeBack()) continue;
    if (!EnsureConnected()) continue;
    StartListening();  // when it failed before (cheap when listening)
    if (!conn_) continue;
    if (session_.empty()) {
      if (!Join()) break;  // fatal: phase() is kFailed
      continue;
    }
    if (absl::Now() >= next_heartbeat_) Heartbeat();
    if (!conn_ || session_.empty()) continue;
    ReportConnections();
    if (!conn_ || session_.empty()) continue;
    if (reap_now_) Reap();
    if (!conn_ || session_.empty()) continue;
    if (rebalance_now_ || absl::Now() >= next_rebalance_) Rebalance();
    if (!conn_ || session_.empty()) continue;
    FinishDrains();
    absl::Time until = std::min(next_heartbeat_, next_rebalance_);
    if (reap_now_) until = absl::Now();  // seen in a view read: reap at once
    if (!revoking_.empty()) until = std::min(until, absl::Now() + kDrainCheck);
    WaitForWork(until);
  }
  if (phase() != Phase::kFailed) Leave();
  // Workers may still run a task: none may borrow the connection, which
  // a stopped member does not keep.
  TakeBack();
  if (conn_ || listen_conn_) Disconnect(absl::OkStatus());
}

bool MemberLoop::EnsureConnected() {
  if (conn_) return true;
  // (A leave is flushed anyway: lost, its parts would wait out the TTL.)
  const store::ConnectOptions options = ControlOptions();
  auto conn = store::Connect(config_.dsn, options);
  if (!conn.ok()) {
    ++connect_failures_;
    const bool busy = store::ServerBusy(conn.status());
    if (busy) metrics_.ConnectionRefused();
    // A full server is a condition to wait out: said once per episode,
    // with backoff and jitter up to 5 s so that a waiting fleet does not
    // knock in step. Other failures are said on every attempt.
    if (!busy || !waiting_for_server_) {
      log_->warn("group={} control connection failed (attempt {}): {}{}",
                 config_.group, connect_failures_,
                 std::string(conn.status().message()),
                 busy ? "; waiting for the server to take connections, "
                        "quietly until it does"
                      : "");
    }
    waiting_for_server_ = busy;
    if (!session_.empty() && absl::Now() - last_heartbeat_ok_ > settings_.ttl) {
      LoseSession("no heartbeat got through for longer than the TTL");
    }
    const absl::Time until =
        absl::Now() + Backoff(connect_failures_, absl::Milliseconds(100),
                              busy ? absl::Seconds(5) : absl::Seconds(2));
    SleepUnlessStopped(until - absl::Now());
    return false;
  }
  if (waiting_for_server_) {
    log_->info("group={} the server takes connections again", config_.group);
  }
  waiting_for_server_ = false;
  if (!UseControl(std::move(*conn), options)) return false;
  // Every "dropped" gets its "restored", even when the first try succeeds.
  if (dropped_ || connect_failures_ > 0) {
    log_->info("group={} control connection restored", config_.group);
  }
  dropped_ = false;
  connect_failures_ = 0;
  rebalance_now_ = true;
  return true;
}

bool MemberLoop::UseControl(std::unique_ptr<pqxx::connection> conn,
                            const store::ConnectOptions& options) {
  conn_ = std::move(conn);
  config_.lent->Set(conn_.get(), options);
  followed_ttl_ = settings_.ttl;
  metrics_.ConnectionOpened("control");
  store::PrepareMemberStatements(*conn_);  // lazily: no round trip here
  StartListening();
  return conn_ != nullptr;  // else a LISTEN found the connection broken
}

pqxx::connection& MemberLoop::ListenConnection() {
  return listen_conn_ ? *listen_conn_ : *conn_;
}

void MemberLoop::StartListening() {
  if (!config_.use_notify || listener_ || !conn_) return;
  // Through a pooler in transaction mode a LISTEN would hold on to
  // whichever server connection ran it, for nobody: without a direct
  // connection to listen on, the member polls.
  if (config_.transaction_pooler && config_.listen_dsn.empty()) return;
  if (absl::Now() < next_listen_try_) return;
  if (!config_.listen_dsn.empty() && !listen_conn_) {
    store::ConnectOptions options;
    options.connect_timeout = config_.connect_timeout;
    options.application_name = "sqlgroup-listen";
    auto conn = store::Connect(config_.listen_dsn, options);
    if (!conn.ok()) {
      StopListening(conn.status());
      return;
    }
    listen_conn_ = std::move(*conn);
    metrics_.ConnectionOpened("listen");
  }
  absl::Status s = store::Guard("listen", [&] {
    listener_ =
        std::make_unique<Listener>(ListenConnection(), store::kChannel, this);
  });
  if (!s.ok()) {
    StopListening(s);
    if (!listen_conn_ && absl::IsUnavailable(s)) Handle(s);
    return;
  }
  if (listen_failures_ > 0) {
    log_->info("group={} listening for NOTIFYs again", config_.group);
  }
  listen_failures_ = 0;
  // Idle parts may be probed less often only while NOTIFYs reach us.
  scheduler_.SetListening(true);
  if (!session_.empty()) ListenForSession();
}

void MemberLoop::StopListening(const absl::Status& why) {
  session_listener_.reset();
  listener_.reset();
  if (listen_conn_) metrics_.ConnectionClosed("listen");
  listen_conn_.reset();
  scheduler_.SetListening(false);
  // Once per episode: a listen connection that stays out of reach is
  // tried again with backoff, quietly.
  if (listen_failures_++ == 0) {
    log_->warn("group={} cannot LISTEN, polling until it can: {}",
               config_.group, std::string(why.message()));
  }
  next_listen_try_ =
      absl::Now() +
      Backoff(listen_failures_, absl::Milliseconds(500), absl::Seconds(30));
}

void MemberLoop::ListenForSession() {
  session_listener_.reset();
  if (!listener_) return;  // not listening at all: polling covers it
  absl::Status s = store::Guard("listen", [&] {
    session_listener_ = std::make_unique<Listener>(
        ListenConnection(), store::SessionChannel(session_), this);
  });
  // Waiting members poll briskly anyway; this only makes them faster.
  if (s.ok()) return;
  if (listen_conn_) {
    StopListening(s);
  } else {
    Handle(s);
  }
}

void MemberLoop::SleepUnlessStopped(absl::Duration d) {
  stop_wakeup_.WaitFor(d);
}

bool MemberLoop::HeartbeatIfDue() {
  if (conn_ && !session_.empty() && absl::Now() >= next_heartbeat_) {
    Heartbeat();
  }
  return conn_ && !session_.empty() && phase() != Phase::kFailed;
}

store::ConnectOptions MemberLoop::ControlOptions() const {
  store::ConnectOptions options = store::CoordinationOptions(
      "sqlgroup-control", settings_.ttl, config_.connect_timeout);
  options.idle_in_transaction_timeout = settings_.ttl;
  options.transaction_pooler = config_.transaction_pooler;
  return options;
}

void MemberLoop::FollowTtl() {
  const absl::StatusOr<bool> set =
      config_.lent->session().timeouts.Follow(*conn_, ControlOptions());
  if (!set.ok()) {
    Handle(set.status());
  } else if (*set && settings_.ttl != followed_ttl_) {
    followed_ttl_ = settings_.ttl;
    log_->info(
        "group={} session={} session TTL is now {}: the control "
        "connection's timeouts follow",
        config_.group, session_, absl::FormatDuration(settings_.ttl));
  }
}

void MemberLoop::Disconnect(const absl::Status& why) {
  if (!why.ok()) {
    log_->warn("group={} session={} control connection dropped: {}",
               config_.group, session_, std::string(why.message()));
  }
  session_listener_.reset();
  listener_.reset();
  if (listen_conn_) metrics_.ConnectionClosed("listen");
  listen_conn_.reset();
  if (conn_) {
    config_.lent->Set(nullptr, {});
    metrics_.ConnectionClosed("control");
  }
  conn_.reset();
  dropped_ = true;
  scheduler_.SetListening(false);
}

void MemberLoop::Handle(const absl::Status& s) {
  if (s.ok()) return;
  // The group is gone, the schema is wrong or we may not use it: retrying
  // cannot help, so the member stops and says why.
  if (absl::IsNotFound(s) || absl::IsFailedPrecondition(s) ||
      absl::IsPermissionDenied(s)) {
    log_->error("group={} {}", config_.group, std::string(s.message()));
    for (const auto& [part, epoch] : local_) scheduler_.Remove(part);
    local_.clear();
    revoking_.clear();
    PublishOwned();
    scheduler_.Shutdown();
    {
      absl::MutexLock lock(&mu_);
      fatal_ = s;
    }
    SetPhase(Phase::kFailed);
    return;
  }
  if (absl::IsUnavailable(s) || absl::IsUnknown(s)) {
    Disconnect(s);
    return;
  }
  log_->warn("group={} session={} {}", config_.group, session_,
             std::string(s.message()));
}

bool MemberLoop::Join() {
  if (IsStatic() && rejoined_after_loss_) {
    // A static member whose session is gone was replaced by a newer process
    // with its instance name, or expired. Replaced, it must not take the
    // place back (two processes with one name would flap): it stops.
    auto holder =
        store::StaticHolder(*conn_, config_.group, config_.session.instance);
    if (!holder.ok()) {
      Handle(holder.status());
      if (phase() == Phase::kFailed) return false;
      SleepUnlessStopped(
          Backoff(++join_failures_, absl::Milliseconds(100), absl::Seconds(5)));
      return true;
    }
    if (holder->has_value()) {
      Handle(absl::FailedPreconditionError(absl::StrCat(
          "instance '", config_.session.instance, "' of group ", config_.group,
          " was taken over by another process (", **holder,
          "): a static member's name may run in one process at a time, and "
          "the newest wins. This one stops; give each process its own "
          "--instance")));
      return false;
    }
  }
  auto id = store::RegisterSession(*conn_, config_.group, config_.session,
                                   config_.use_notify);
  if (!id.ok()) {
    Handle(id.status());
    if (phase() == Phase::kFailed) return false;
    SleepUnlessStopped(
        Backoff(++join_failures_, absl::Milliseconds(100), absl::Seconds(5)));
    return true;
  }
  join_failures_ = 0;
  session_ = id->session;
  returned_ = id->replaced;
  const absl::Time now = absl::Now();
  last_heartbeat_ok_ = now;
  next_heartbeat_ =
      config_.shared_heartbeat
          ? config_.shared_heartbeat->NextSlot(now, settings_.heartbeat)
          : now + settings_.heartbeat;
  next_watch_ = next_heartbeat_;  // the first heartbeat sets the reap timer
  rebalance_now_ = true;
  SetPhase(Phase::kActive);
  PublishOwned();
  // Before the first membership read, so no part freed for this session
  // goes unheard.
  ListenForSession();
  if (!conn_) return true;  // the LISTEN found the connection broken
  // Housekeeping: a failure only delays the trim, it must not stop the
  // member (a broken connection shows again at the next heartbeat).
  const auto pruned = store::PruneOwnershipLog(*conn_, config_.group,
                                               kOwnershipHistory, kPruneBatch);
  if (!pruned.ok()) {
    log_->warn("group={} session={} ownership log not trimmed: {}",
               config_.group, session_, std::string(pruned.status().message()));
  }
  return true;
}

absl::StatusOr<std::optional<store::Beat>> MemberLoop::SendHeartbeat(
    bool watch) {
  if (config_.shared_heartbeat) {
    auto beat = SharedBeat();
    if (beat.ok() || !(absl::IsUnavailable(beat.status()) ||
                       absl::IsDeadlineExceeded(beat.status()))) {
      return beat;
    }
    // The shared connection is down or slow, not necessarily this one: a
    // member's session must not depend on a connection it does not own.
    log_->warn(
        "group={} session={} shared heartbeat failed ({}); "
        "heartbeating on the control connection",
        config_.group, session_, std::string(beat.status().message()));
    watch = true;
  }
  return store::Heartbeat(*conn_, session_, watch);
}

void MemberLoop::Adopt(const store::GroupSettings& settings) {
  if (config_.shared_heartbeat && settings.ttl != settings_.ttl) {
    config_.shared_heartbeat->Attach(settings.ttl);
    config_.shared_heartbeat->Detach(settings_.ttl);
  }
  const bool resized = settings.parts != settings_.parts;
  settings_ = settings;
  if (config_.ttl_ns) {
    config_.ttl_ns->store(absl::ToInt64Nanoseconds(settings_.ttl));
  }
  if (config_.key_order) config_.key_order->store(settings_.key_order);
  // A new assignor or part count changes the targets: read the group now.
  if (settings.assignor != assignor_name_) rebalance_now_ = true;
  if (resized) rebalance_now_ = true;
  assignor_name_ = settings.assignor;
}

void MemberLoop::Heartbeat() {
  const absl::Time start = absl::Now();
  const bool shared = config_.shared_heartbeat != nullptr;
  const bool watch = shared || start >= next_watch_;
  auto beat = SendHeartbeat(watch);
  if (!beat.ok()) {
    Handle(beat.status());
    next_heartbeat_ = absl::Now() + settings_.heartbeat / 4;
    return;
  }
  if (!beat->has_value()) {
    // Expired or reaped. Unless the group itself is gone, start over.
    auto group = store::ReadGroup(*conn_, config_.group);
    if (!group.ok()) {
      Handle(group.status());
      if (phase() == Phase::kFailed) return;
    }
    LoseSession("session expired or was reaped");
    return;
  }
  Adopt((*beat)->settings);
  last_heartbeat_ok_ = start;
  metrics_.Heartbeat(absl::Now() - start);
  // Shared: on the process's grid, where the other members ask too.
  next_heartbeat_ =
      shared ? config_.shared_heartbeat->NextSlot(start, settings_.heartbeat)
             : start + settings_.heartbeat;
  if (!watch) return;
  // Watch again with the first heartbeat after the next other member would
  // expire (a little past, so the server's clock agrees): then it has
  // either heartbeated, and the timer moves on, or it is reaped right then.
  // A TTL at the latest, so the fingerprint below is read even while alone.
  // Waiting for our own heartbeat delays a reap by at most one interval
  // (with many members, the first watcher's is soon), and sends no extra
  // statement.
  // Counted from the reply, not the request: the server measured the
  // expiry in between, so the timer cannot fire before it.
  const absl::Time now = absl::Now();
  const absl::Duration next_expiry = (*beat)->next_expiry;
  // Shared: only the member told of the next expiry reaps, not every
  // member of the process (all of them see the same change).
  may_reap_ = !shared || next_expiry != absl::InfiniteDuration();
  if (next_expiry <= absl::ZeroDuration()) reap_now_ = true;
  next_watch_ = now + settings_.ttl;
  if (next_expiry != absl::InfiniteDuration()) {
    next_watch_ = std::min(next_watch_,
                           now + std::max(next_expiry, absl::ZeroDuration()) +
                               absl::Milliseconds(5));
  }
  // Someone joined or left without a NOTIFY (or it was missed).
  if ((*beat)->membership != last_membership_) {
    rebalance_now_ = true;
  }
}

void MemberLoop::Reap() {
  reap_now_ = false;
  log_->debug("group={} session={} reaping expired sessions", config_.group,
              session_);
  next_watch_ = next_heartbeat_;  // which sets the timer again
  // Stop at the next heartbeat: several reaps blocked by zombies' locks
  // must not cost this member its own session.
  auto reaped = store::ReapExpired(*conn_, config_.group, config_.use_notify,
                                   next_heartbeat_);
  if (!reaped.ok()) {
    Handle(reaped.status());
    return;
  }
  if (!reaped->empty()) {
    log_->info("group={} session={} reaped expired session(s) {}",
               config_.group, session_, absl::StrJoin(*reaped, ","));
    reaped_since_rebalance_ = true;
    rebalance_now_ = true;
  }
  // Nobody expired after all (a late heartbeat): the next heartbeat of
  // ours sets the timer again.
}

// Why the target changed: this member rejoined after losing its session,
// the group's part count changed, a static member came back to its place (this
// one or another), someone joined, someone was reaped (expired), or someone
// left.
std::string MemberLoop::RebalanceReason(const store::GroupView& view) const {
  if (rejoined_after_loss_) return "lost";
  if (resizing_) return "parts";
  if (returned_) return "return";
  bool joined = false;
  for (const std::string& s : view.live_sessions) {
    if (std::binary_search(last_live_.begin(), last_live_.end(), s)) continue;
    auto it = view.static_instances.find(s);
    if (it != view.static_instances.end() &&
        std::any_of(last_static_.begin(), last_static_.end(),
                    [&](const auto& e) { return e.second == it->second; })) {
      return "return";
    }
    joined = true;
  }
  if (joined) return "join";
  return reaped_since_rebalance_ ? "expiry" : "leave";
}

void MemberLoop::Rebalance() {
  const absl::Time now = absl::Now();
  rebalance_now_ = false;
  // While listening, NOTIFYs and the heartbeats' fingerprint of the live
  // members cover every change: the periodic read is only a safety net,
  // spread by +-20% so the members that rebalanced together do not all
  // re-read together.
  next_rebalance_ = now + (listener_ ? config_.rebalance_poll_listening *
                                           absl::Uniform(jitter_, 0.8, 1.2)
                                     : config_.rebalance_poll);
  auto view = store::ReadGroupView(*conn_, config_.group, session_);
  if (!view.ok()) {
    Handle(view.status());
    return;
  }
  if (!std::binary_search(view->live_sessions.begin(),
                          view->live_sessions.end(), session_)) {
    LoseSession("session is no longer live");
    return;
  }
  Adopt(view->settings);
  // The heartbeats time the reaping of members that will expire; these
  // already have.
  if (view->expired_sessions > 0 && may_reap_) reap_now_ = true;
  std::shared_ptr<const Assignor> assignor = config_.assignor;
  if (!assignor) assignor = AssignorNamed(settings_.assignor);
  if (!assignor) {
    // Assigning otherwise than the others could take a part another
    // member is meant to own: leave (the parts move at once), then stop.
    const absl::Status left = store::LeaveSession(*conn_, config_.group,
                                                  session_, config_.use_notify);
    if (!left.ok()) {
      log_->warn(
          "group={} session={} could not leave ({}); it expires after "
          "the TTL",
          config_.group, session_, std::string(left.message()));
    }
    Handle(absl::FailedPreconditionError(absl::StrCat(
        "group ", config_.group, " uses the assignor '", settings_.assignor,
        "', which this sqlgroup does not know: run a version that does on "
        "every member, or set the group's assignor to one this version "
        "knows (lexical, sticky)")));
    return;
  }
  if (layout_parts_ != settings_.parts) {
    if (!local_.empty()) {
      ChangeLayout(*view, now);
      return;
    }
    resizing_ = layout_parts_ != 0;
    layout_parts_ = settings_.parts;
  }
  assignment_ = AssignMembers(*assignor, *view, session_, settings_.parts);
  const RebalancePlan plan =
      PlanRebalance(session_, assignment_, view->ownership, local_);
  metrics_.Members(static_cast<int>(view->live_sessions.size()));
  metrics_.Parts(settings_.parts);
  if (plan.target != last_target_) {
    rebalance_reason_ = RebalanceReason(*view);
    metrics_.RebalanceStarted(rebalance_reason_);
    rejoined_after_loss_ = false;
    returned_ = false;
    // A part-count change is timed from when its drain began.
    if (!resizing_ || !rebalance_started_) rebalance_started_ = now;
    resizing_ = false;
    log_->info("group={} session={} {} live member(s); target parts {}",
               config_.group, session_, view->live_sessions.size(),
               Parts(plan.target));
    last_target_ = plan.target;
  }
  last_live_ = view->live_sessions;
  last_static_ = view->static_instances;
  last_membership_ = view->membership;
  metrics_.StaticAway(view->away_until);
  reaped_since_rebalance_ = false;
  if (!plan.lost.empty()) {
    // Their acks will be refused, and another member may run the items
    // now: the calls on them end at once.
    CutOff(session_, BusyOf(plan.lost), "on parts taken from it", true);
    for (int part : plan.lost) {
      scheduler_.Remove(part);
      local_.erase(part);
      revoking_.erase(part);
    }
    log_->warn("group={} session={} parts {} lost", config_.group, session_,
               Parts(plan.lost));
    CallListener("OnPartsLost", &RebalanceListener::OnPartsLost, plan.lost);
  }
  for (const auto& [part, epoch] : plan.adopt) {
    scheduler_.Add({config_.group, session_, part, epoch},
                   PartRange(part, layout_parts_));
    local_[part] = epoch;
  }
  const std::set<int> target(plan.target.begin(), plan.target.end());
  std::vector<int> drop_now;
  std::vector<int> revoked;
  for (int part : plan.drop) {
    if (!local_.count(part)) {
      drop_now.push_back(part);  // nothing runs it here: no drain needed
    } else if (!revoking_.count(part)) {
      StartRevoke(part, now);
      revoked.push_back(part);
    }
  }
  std::vector<int> kept;
  for (auto it = revoking_.begin(); it != revoking_.end();) {
    if (target.count(it->first) && local_.count(it->first)) {
      scheduler_.Unrevoke(it->first);
      kept.push_back(it->first);
      it = revoking_.erase(it);
    } else {
      ++it;
    }
  }
  // Each phase below is a statement bounded by TTL/4; the heartbeat must
  // not wait for all of them.
  if (!HeartbeatIfDue()) return;
  MarkRevoking(BusyOf(revoked), true);  // idle ones are dropped at once
  MarkRevoking(kept, false);
  if (!drop_now.empty()) {
    Handle(store::DropParts(*conn_, config_.group, session_, drop_now,
                            layout_parts_, config_.use_notify,
                            TargetsOf(drop_now))
               .status());
  }
  if (!HeartbeatIfDue()) return;
  if (!plan.take.empty()) {
    auto taken = store::TakeParts(*conn_, config_.group, session_, plan.take,
                                  layout_parts_);
    if (!taken.ok()) {
      Handle(taken.status());
    } else if (!taken->empty()) {
      std::vector<int> parts;
      std::vector<int> of_the_dead;
      for (const store::Owner& o : *taken) {
        scheduler_.Add({config_.group, session_, o.part, o.epoch},
                       PartRange(o.part, layout_parts_), o.predecessor_died_at);
        local_[o.part] = o.epoch;
        parts.push_back(o.part);
        if (o.predecessor_died_at) of_the_dead.push_back(o.part);
      }
      if (!of_the_dead.empty()) {
        log_->info(
            "group={} session={} parts {} come from a member that died: the "
            "items it may have been running count an attempt as they are "
            "handed out again",
            config_.group, session_, Parts(of_the_dead));
      }
      metrics_.PartsTaken(static_cast<int>(parts.size()), rebalance_reason_);
      log_->info("group={} session={} took parts {}", config_.group, session_,
                 Parts(parts));
      CallListener("OnPartsAssigned", &RebalanceListener::OnPartsAssigned,
                   parts);
    }
  }
  if (!HeartbeatIfDue()) return;
  FinishDrains();
  bool converged = revoking_.empty();
  for (int part : plan.target) converged &= local_.count(part) > 0;
  if (converged && rebalance_started_) {
    const absl::Duration took = absl::Now() - *rebalance_started_;
    metrics_.RebalanceDone(took);
    log_->info("group={} session={} rebalance done in {:.1f} ms, owning {}",
               config_.group, session_, absl::ToDoubleMilliseconds(took),
               Parts(Keys(local_)));
    rebalance_started_.reset();
  }
  if (!converged) {
    // Waiting for others to let go: they NOTIFY when they do, but keep
    // polling briskly in case that is missed or unsupported.
    next_rebalance_ =
        std::min(next_rebalance_, absl::Now() + config_.rebalance_poll / 5);
  }
  PublishOwned();
}

// The group's part count changed (group alter --parts): every part this
// member runs stands for a range of the old layout. It drains and drops
// them all before it takes any of the new layout (whose numbers mean other
// ranges); the database refuses a new take while an overlapping old one
// exists, so members that see the change at different times never run
// overlapping ranges. Wakes every member when it drops: any of them may be
// waiting for these ranges.
void MemberLoop::ChangeLayout(const store::GroupView& view, absl::Time now) {
  if (!resizing_) {
    resizing_ = true;
    rebalance_started_ = now;
    last_target_.clear();
    log_->info(
        "group={} session={} the group's part count changed from {} to {}: "
        "draining parts {} of the old layout before taking new ones",
        config_.group, session_, layout_parts_, settings_.parts,
        Parts(Keys(local_)));
  }
  last_live_ = view.live_sessions;
  last_static_ = view.static_instances;
  last_membership_ = view.membership;
  std::vector<int> revoked;
  for (const auto& [part, epoch] : local_) {
    if (revoking_.count(part)) continue;
    StartRevoke(part, now);
    revoked.push_back(part);
  }
  if (!HeartbeatIfDue()) return;
  MarkRevoking(BusyOf(revoked), true);
  FinishDrains();
  if (local_.empty()) {
    rebalance_now_ = true;  // take the new layout's parts at once
  } else {
    next_rebalance_ =
        std::min(next_rebalance_, absl::Now() + config_.rebalance_poll / 5);
  }
}

std::vector<std::string> MemberLoop::TargetsOf(
    const std::vector<int>& parts) const {
  if (layout_parts_ != settings_.parts) {
    // Old-layout parts: whoever is meant to run their ranges now.
    std::vector<std::string> others;
    for (const std::string& s : last_live_) {
      if (s != session_) others.push_back(s);
    }
    return others;
  }
  std::set<std::string> targets;
  for (int part : parts) {
    if (part < static_cast<int>(assignment_.owner.size())) {
      targets.insert(assignment_.sessions[assignment_.owner[part]]);
    }
  }
  targets.erase(session_);
  return {targets.begin(), targets.end()};
}

void MemberLoop::CallListener(
    const char* name,
    void (RebalanceListener::*callback)(const std::vector<int>&),
    const std::vector<int>& parts) {
  if (!config_.listener) return;
  // The user's code runs on the control thread: an exception must neither
  // end the thread (and the process) nor stop the rebalance half-way.
  try {
    (config_.listener->*callback)(parts);
  } catch (const std::exception& e) {
    log_->error("group={} session={} RebalanceListener::{}({}) threw: {}",
                config_.group, session_, name, Parts(parts), e.what());
  } catch (...) {
    log_->error("group={} session={} RebalanceListener::{}({}) threw",
                config_.group, session_, name, Parts(parts));
  }
}

void MemberLoop::StartRevoke(int part, absl::Time now) {
  scheduler_.Revoke(part);
  revoking_[part] = {now};
}

void MemberLoop::MarkRevoking(const std::vector<int>& parts, bool revoking) {
  if (parts.empty() || !conn_) return;
  const absl::Status s = store::MarkRevoking(*conn_, config_.group, session_,
                                             parts, layout_parts_, revoking);
  if (s.ok()) return;
  // Only describe reads the mark: a failure changes nothing of the
  // handover, unless the connection is gone.
  if (absl::IsUnavailable(s)) {
    Handle(s);
    return;
  }
  log_->warn("group={} session={} could not mark parts {} as {}: {}",
             config_.group, session_, Parts(parts),
             revoking ? "revoking" : "kept", std::string(s.message()));
}

std::vector<int> MemberLoop::BusyOf(const std::vector<int>& parts) const {
  std::vector<int> busy;
  for (int part : parts) {
    if (scheduler_.Busy(part)) busy.push_back(part);
  }
  return busy;
}

void MemberLoop::CutOff(const std::string& session,
                        const std::vector<int>& parts, const char* why,
                        bool say) {
  if (parts.empty()) return;
  if (say) {
    log_->warn("group={} session={} parts {} still run handler calls {}{}",
               config_.group, session, Parts(parts), why,
               !config_.cut_off
                   ? "; this handler cannot be cut off: waiting for them"
                   : ": cutting them off; their items are retried with the "
                     "attempt counted");
    if (config_.cut_off) metrics_.CutOff(static_cast<int>(parts.size()));
  }
  if (!config_.cut_off) return;
  try {
    config_.cut_off(session, parts);
  } catch (const std::exception& e) {
    log_->error("group={} session={} cut_off({}) threw: {}", config_.group,
                session, Parts(parts), e.what());
  } catch (...) {
    log_->error("group={} session={} cut_off({}) threw", config_.group, session,
                Parts(parts));
  }
}

void MemberLoop::FinishDrains() {
  const absl::Time now = absl::Now();
  std::vector<int> ready;
  std::vector<int> overdue;
  std::vector<int> cut_before;
  for (auto& [part, revoke] : revoking_) {
    // Never while a handler call on the part runs: its next owner would
    // start the same item while this one is still on it.
    if (!scheduler_.Busy(part)) {
      ready.push_back(part);
    } else if (now >= revoke.since + config_.drain_timeout) {
      (revoke.cut_off ? cut_before : overdue).push_back(part);
      revoke.cut_off = true;
    }
  }
  const std::string after = absl::StrCat(
      "since their revoke, ", absl::FormatDuration(config_.drain_timeout),
      " (drain_timeout) ago, and move only once those return");
  CutOff(session_, overdue, after.c_str(), true);
  // Again for calls that began since (a batch's next item).
  CutOff(session_, cut_before, "", false);
  if (ready.empty()) return;
  CallListener("OnPartsRevoked", &RebalanceListener::OnPartsRevoked, ready);
  auto dropped =
      store::DropParts(*conn_, config_.group, session_, ready, layout_parts_,
                       config_.use_notify, TargetsOf(ready));
  if (!dropped.ok()) {
    Handle(dropped.status());
    return;
  }
  for (int part : ready) {
    scheduler_.Remove(part);
    local_.erase(part);
    metrics_.HandoverWaited(now - revoking_[part].since);
    revoking_.erase(part);
  }
  log_->info("group={} session={} dropped parts {}", config_.group, session_,
             Parts(ready));
  rebalance_now_ = true;  // see whether the target is complete now
  PublishOwned();
}

void MemberLoop::LoseSession(const std::string& why) {
  metrics_.SessionLost();
  rejoined_after_loss_ = true;
  const std::vector<int> parts = Keys(local_);
  log_->warn("group={} session={} lost: {}; parts {} are void, rejoining",
             config_.group, session_, why, Parts(parts));
  // Their acks will be refused, and another member may run the items
  // now: the calls on them end at once.
  CutOff(session_, BusyOf(parts), "of a lost session", true);
  for (int part : parts) scheduler_.Remove(part);
  session_listener_.reset();
  local_.clear();
  revoking_.clear();
  last_target_.clear();
  rebalance_started_.reset();
  if (!parts.empty()) {
    CallListener("OnPartsLost", &RebalanceListener::OnPartsLost, parts);
  }
  SetPhase(Phase::kJoining);
  session_.clear();
  PublishOwned();
}

void MemberLoop::ReportConnections() {
  const int held = static_cast<int>(metrics_.connections());
  const int budget = config_.budget->limit();
  if (reported_session_ == session_ && held == reported_connections_ &&
      budget == reported_budget_) {
    return;
  }
  const absl::Time now = absl::Now();
  if (now < next_connections_report_) return;
  next_connections_report_ = now + kConnectionsReport;
  const absl::Status s =
      store::ReportConnections(*conn_, session_, held, budget);
  if (!s.ok()) {
    // A schema older than 11 has no such columns; nothing else depends on
    // them, so the member goes on without reporting.
    if (absl::IsFailedPrecondition(s) || absl::IsPermissionDenied(s)) {
      log_->warn("group={} cannot report its connections for describe: {}",
                 config_.group, std::string(s.message()));
      next_connections_report_ = absl::InfiniteFuture();
      return;
    }
    Handle(s);
    return;
  }
  reported_session_ = session_;
  reported_connections_ = held;
  reported_budget_ = budget;
}

bool MemberLoop::TakeBack() {
  // A worker's task on the control connection may outlast a heartbeat (a
  // slow handler of the first claim after a quiet spell): the control
  // thread then leaves the connection to it and goes on with a new one,
  // so that heartbeats, rebalancing and reaping never wait for a handler.
  // Once a heartbeat is late by an interval: a handler of a few hundred
  // milliseconds costs no new connection.
  std::optional<bool> held;
  while (!(held = config_.lent->Hold(session_.empty() ? absl::InfiniteFuture()
                                                      : ReplaceControlAt()))) {
    if (phase() == Phase::kFailed) continue;
    if (ReplaceControl()) return true;
    BeatWhileHeld();
  }
  if (!*held) {
    Disconnect(
        absl::UnavailableError("a worker found the control connection broken"));
    return false;
  }
  if (conn_) FollowTtl();  // a borrower may have set a worker's limits
  return true;
}

absl::Time MemberLoop::ReplaceControlAt() const {
  const absl::Time now = absl::Now();
  // Once a heartbeat is late by an interval: a handler of a few hundred
  // milliseconds costs no new connection. But a TTL may be as short as
  // two intervals: never later than one before it ends. After an attempt
  // that failed, again a quarter of an interval later.
  const absl::Time at =
      std::min(std::max(next_heartbeat_, now) + settings_.heartbeat,
               last_heartbeat_ok_ + settings_.ttl - settings_.heartbeat);
  return std::max(at, now + settings_.heartbeat / 4);
}

absl::StatusOr<std::optional<store::Beat>> MemberLoop::SharedBeat() {
  // Behind a statement in flight, then its own.
  return config_.shared_heartbeat->Beat(
      config_.group, session_,
      absl::Now() + HeartbeatBatcher::kGather +
          2 * store::CoordinationBound(settings_.ttl));
}

void MemberLoop::BeatWhileHeld() {
  if (!config_.shared_heartbeat || session_.empty()) return;
  // Not SendHeartbeat: its fallback is the control connection, which the
  // worker has.
  auto beat = SharedBeat();
  if (beat.ok() && beat->has_value()) {
    last_heartbeat_ok_ = absl::Now();
    next_heartbeat_ = last_heartbeat_ok_ + settings_.heartbeat;
  }
}

// What the control thread leaves to a worker that keeps its connection:
// closed on the worker's thread when it gives the connection back, with
// the slot that connection held (the new one has the worker's).
struct MemberLoop::Orphan {
  std::unique_ptr<Listener> session_listener;
  std::unique_ptr<Listener> listener;  // before the connection they are on
  std::unique_ptr<pqxx::connection> conn;
  ConnectionBudget* budget;
  MemberMetrics* metrics;
  ~Orphan() {
    session_listener.reset();
    listener.reset();
    conn.reset();
    metrics->ConnectionClosed("control");
    // The control connection's kept slot is the new one's now, and the
    // slot the worker lent is free again.
    budget->Release();
  }
};

bool MemberLoop::ReplaceControl() {
  // On the slot the borrower lent with the connection (a worker without
  // one of its own borrows only then for the first claim after a quiet
  // spell; a borrower without a slot, on a budget of one or a full server,
  // is waited for, as there is nowhere to go). The new connection first:
  // the old one is given up only once there is one to go on with.
  if (!config_.lent->BorrowerLentSlot()) return false;
  const store::ConnectOptions options = ControlOptions();
  auto conn = store::Connect(config_.dsn, options);
  if (!conn.ok()) {
    if (store::ServerBusy(conn.status())) metrics_.ConnectionRefused();
    log_->warn(
        "group={} session={} a handler keeps the control connection past a "
        "heartbeat, and a new one failed: {}",
        config_.group, session_, std::string(conn.status().message()));
    return false;
  }
  const bool abandoned = config_.lent->Abandon([&] {
    auto orphan = std::make_shared<Orphan>();
    orphan->budget = config_.budget;
    orphan->metrics = &metrics_;
    if (!listen_conn_) {  // else they are on the listen connection
      orphan->session_listener = std::move(session_listener_);
      orphan->listener = std::move(listener_);
    }
    orphan->conn = std::move(conn_);
    return std::shared_ptr<void>(std::move(orphan));
  });
  if (!abandoned) return false;  // given back meanwhile: `conn` closes
  log_->info(
      "group={} session={} a handler keeps the control connection past a "
      "heartbeat; the member goes on with a new one (the old one closes "
      "when the handler is done)",
      config_.group, session_);
  if (!listener_) scheduler_.SetListening(false);
  // The session stays; the new connection listens, and the group is read
  // again (NOTIFYs may have waited behind the handler).
  rebalance_now_ = true;
  return UseControl(std::move(*conn), options);
}

void MemberLoop::LendWhile(int sock, absl::Duration timeout,
                           bool wake_on_stop) {
  config_.lent->ClearReturned();
  config_.lent->Lend();
  const absl::Time deadline = absl::Now() + timeout;
  // (A stop request stays signaled: while leaving, it cannot wake us.)
  pollfd fds[3] = {{wake_on_stop ? stop_wakeup_.fd() : -1, POLLIN, 0},
                   {config_.lent->returned_fd(), POLLIN, 0},
                   {sock, POLLIN, 0}};
  while (absl::Now() < deadline) {
    // While a worker has the connection, its own results make the socket
    // readable: then only a stop or its return counts (it dispatches the
    // NOTIFYs it reads), looked at again every few milliseconds in case
    // one came after its last read. A socket readable while nobody
    // borrowed it since before the poll has NOTIFYs.
    const uint64_t borrows = config_.lent->borrows();
    const bool borrowed = config_.lent->Borrowed();
    const int n = borrowed || sock < 0 ? 2 : 3;
    const absl::Duration wait =
        borrowed ? std::min(kBorrowedPoll, deadline - absl::Now())
                 : deadline - absl::Now();
    for (pollfd& fd : fds) fd.revents = 0;
    const int ready = poll(fds, n, PollTimeoutMs(wait));
    if (ready < 0 || fds[0].revents != 0 || fds[1].revents != 0) break;
    if (n == 3 && fds[2].revents != 0 && config_.lent->borrows() == borrows &&
        !config_.lent->Borrowed()) {
      break;
    }
  }
}

void MemberLoop::WaitForWork(absl::Time until) {
  // Blocks on the connection's socket and the stop request, not on a timer:
  // an idle member's control thread wakes only when something happened or
  // is due. Meanwhile its workers may borrow the control connection.
  while (!StopRequested() && !rebalance_now_ && conn_) {
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return;
    if (listener_ && !listen_conn_) {
      // NOTIFYs that came with the results of this thread's own statements
      // are already read, and the socket will not show them.
      Handle(store::AwaitNotifications(*conn_, stop_wakeup_.fd(),
                                       absl::ZeroDuration()));
      if (!conn_ || rebalance_now_) return;
    }
    absl::Status listened;
    if (listener_ && listen_conn_) {
      // NOTIFYs come on their own connection: the control connection is
      // lent until they do, or a worker gives it back.
      config_.lent->ClearReturned();
      config_.lent->Lend();
      listened = store::AwaitNotifications(*listen_conn_, stop_wakeup_.fd(),
                                           left, config_.lent->returned_fd());
    } else {
      LendWhile(listener_ ? conn_->sock() : -1, left);
    }
    if (!TakeBack()) return;
    if (!listener_) continue;
    if (listen_conn_) {
      if (!listened.ok()) StopListening(listened);  // the control is fine
      continue;
    }
    // What arrived on the control connection, or a borrower read.
    Handle(store::AwaitNotifications(*conn_, stop_wakeup_.fd(),
                                     absl::ZeroDuration()));
  }
}

void MemberLoop::Leave() {
  SetPhase(Phase::kLeaving);
  const absl::Time since = absl::Now();
  std::vector<int> revoked;
  for (const auto& [part, epoch] : local_) {
    if (revoking_.count(part)) continue;
    StartRevoke(part, since);
    revoked.push_back(part);
  }
  PublishOwned();
  const std::vector<int> marked = BusyOf(revoked);
  if (!session_.empty()) MarkRevoking(marked, true);
  // The session and its parts stay until every handler call returned: a
  // part released under a running call would start its item elsewhere.
  bool cut = false;
  if (scheduler_.AnyBusy()) {
    log_->info(
        "group={} session={} leaving once the handler calls in flight "
        "return (cut off after {}, drain_timeout)",
        config_.group, session_, absl::FormatDuration(config_.drain_timeout));
  }
  while (scheduler_.AnyBusy()) {
    if (absl::Now() >= since + config_.drain_timeout) {
      CutOff(session_, scheduler_.BusyParts(),
             "as the member stops, past its drain_timeout", !cut);
      cut = true;
    }
    // In-flight acks are fenced on this session being alive: keep it so.
    // One try per heartbeat interval, also when it fails: a database that
    // is down is not asked every few milliseconds.
    if (!session_.empty() && absl::Now() >= next_heartbeat_) {
      next_heartbeat_ = absl::Now() + settings_.heartbeat;
      if (conn_ || EnsureConnected()) {
        auto beat = SendHeartbeat(/*watch=*/false);
        if (!beat.ok()) Handle(beat.status());
      }
    }
    // The items in flight may be on the control connection.
    LendWhile(-1, kDrainCheck, /*wake_on_stop=*/false);
    TakeBack();
  }
  for (const auto& [part, revoke] : revoking_) {
    metrics_.HandoverWaited(absl::Now() - revoke.since);
  }
  if (!local_.empty()) {
    CallListener("OnPartsRevoked", &RebalanceListener::OnPartsRevoked,
                 Keys(local_));
  }
  scheduler_.Shutdown();
  if (!session_.empty() && IsStatic() && !leave_for_good_ &&
      (conn_ || EnsureConnected())) {
    // Keeps its place and its parts for the static timeout: a restart with
    // the same name within it moves nothing. They wait, not hand over.
    MarkRevoking(marked, false);
    absl::Status s =
        store::StepAway(*conn_, config_.group, session_, config_.use_notify);
    if (s.ok()) {
      log_->info(
          "group={} session={} instance={} steps away: its parts wait for it "
          "for {}",
          config_.group, session_, config_.session.instance,
          absl::FormatDuration(config_.session.static_timeout));
    } else {
      log_->warn(
          "group={} session={} could not step away ({}); it expires "
          "after the TTL",
          config_.group, session_, std::string(s.message()));
    }
  } else if (!session_.empty() && (conn_ || EnsureConnected())) {
    absl::Status s = store::LeaveSession(*conn_, config_.group, session_,
                                         config_.use_notify);
    if (s.ok()) {
      log_->info("group={} session={} left the group", config_.group, session_);
    } else {
      log_->warn(
          "group={} session={} could not delete its session ({}); it "
          "expires after the TTL",
          config_.group, session_, std::string(s.message()));
    }
  }
  local_.clear();
  revoking_.clear();
  PublishOwned();
  SetPhase(Phase::kLeft);
  session_.clear();
  PublishOwned();
}

}  // namespace sqlgroup
