#include "member/member_loop.h"

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/random/distributions.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "grant_hint.h"
#include "member/backoff.h"
#include "member/pg_control_channel.h"
#include "session_secret.h"
#include "spdlog/spdlog.h"
#include "store/pg_membership_store.h"

namespace sqlgroup {
namespace {

constexpr absl::Duration kDrainCheck = absl::Milliseconds(10);
// The ownership log keeps a day of history. It grows only when membership
// changes, so it is trimmed at one of those: each join.
constexpr absl::Duration kOwnershipHistory = absl::Hours(24);
constexpr int kPruneBatch = 10000;

std::vector<int> Keys(const std::map<int, int64_t>& m) {
  std::vector<int> keys;
  for (const auto& [k, v] : m) keys.push_back(k);
  return keys;
}

// The control connection and its statements, over PostgreSQL.
MemberSeamsFactory PostgresSeams(const MemberConfig& config,
                                 PartScheduler& scheduler,
                                 MemberMetrics& metrics,
                                 std::shared_ptr<spdlog::logger> logger) {
  return [=, &scheduler, &metrics](const NotificationRouter& router,
                                   const Wakeup& stop) {
    auto channel = std::make_unique<PgControlChannel>(
        config.channel, router, scheduler, metrics, logger, stop);
    PgControlChannel* pg = channel.get();
    MemberSeams seams;
    seams.store = std::make_unique<store::PgMembershipStore>(
        [pg] { return pg->connection(); });
    seams.channel = std::move(channel);
    return seams;
  };
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

MemberLoop::MemberLoop(MemberConfig config, store::GroupSettings settings,
                       PartScheduler& scheduler, MemberMetrics& metrics,
                       std::shared_ptr<spdlog::logger> logger,
                       const MemberSeamsFactory& seams)
    : config_(std::move(config)),
      scheduler_(scheduler),
      metrics_(metrics),
      log_(std::move(logger)),
      router_(config_.group,
              {.membership_changed = [this] { rebalance_now_ = true; },
               .items_arrived = [this] { scheduler_.WakeIdle(); },
               .items_arrived_in =
                   [this](const std::vector<KeyRange>& ranges) {
                     scheduler_.WakeParts(ranges);
                   },
               .items_due_in =
                   [this](absl::Duration delay) {
                     scheduler_.ExpectAt(absl::Now() + delay);
                   },
               .schema_changed = [this] { schema_.Changed(); }}),
      seams_(
          (seams ? seams : PostgresSeams(config_, scheduler_, metrics_, log_))(
              router_, stop_wakeup_)),
      channel_(*seams_.channel),
      store_(*seams_.store),
      rebalancer_(config_.rebalance, store_, scheduler_, metrics_, log_),
      keeper_({.group = config_.group,
               .use_notify = config_.use_notify,
               .shared_heartbeat = config_.shared_heartbeat},
              store_, metrics_, log_),
      keep_alive_{.replace_at = [this] { return keeper_.ReplaceControlAt(); },
                  .keep_alive = [this] { keeper_.BeatWhileHeld(); }},
      schema_({.group = config_.group,
               .at_start = config_.schema,
               .interval = config_.schema_check,
               .published = config_.schema_version},
              store_, log_),
      connections_(config_.group, store_, log_),
      settings_(settings) {
  channel_.SetTtl(settings_.ttl);
}

MemberLoop::~MemberLoop() = default;

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
  return Keys(scheduler_.Parts());
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

void MemberLoop::PublishSession() {
  rebalancer_.Publish(session_);
  absl::MutexLock lock(&mu_);
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
  auto connected = [this] { return channel_.connected() && !session_.empty(); };
  while (!StopRequested()) {
    if (phase() == Phase::kFailed) break;
    if (!TakeBack()) continue;
    if (!EnsureConnected()) continue;
    channel_.StartListening();  // when it failed before (cheap when listening)
    if (!channel_.connected()) continue;
    if (schema_.Due(absl::Now())) {
      CheckSchema();
      if (phase() == Phase::kFailed) break;
      if (!channel_.connected()) continue;
    }
    if (session_.empty()) {
      if (!Join()) break;  // fatal: phase() is kFailed
      continue;
    }
    if (absl::Now() >= keeper_.next_heartbeat()) Heartbeat();
    if (!connected()) continue;
    ReportConnections();
    if (!connected()) continue;
    if (keeper_.reap_due()) Reap();
    if (!connected()) continue;
    if (rebalance_now_ || absl::Now() >= next_rebalance_) Rebalance();
    if (!connected()) continue;
    FinishDrains();
    absl::Time until = std::min(
        {keeper_.next_heartbeat(), next_rebalance_, schema_.next_check()});
    // Seen in a view read: reap at once.
    if (keeper_.reap_due()) until = absl::Now();
    if (rebalancer_.draining()) {
      until = std::min(until, absl::Now() + kDrainCheck);
    }
    WaitForWork(until);
  }
  if (phase() != Phase::kFailed) Leave();
  // Workers may still run a task: none may borrow the connection, which
  // a stopped member does not keep.
  TakeBack();
  channel_.Disconnect(absl::OkStatus());
}

bool MemberLoop::EnsureConnected() {
  if (channel_.connected()) return true;
  const absl::Status s = channel_.Connect();
  if (!s.ok()) {
    if (!session_.empty() && !keeper_.Fresh(absl::Now())) {
      LoseSession("no heartbeat got through for longer than the TTL");
    }
    SleepUnlessStopped(channel_.retry_delay());
    return false;
  }
  rebalance_now_ = true;
  schema_.Changed();  // a notice may have gone unheard meanwhile
  return true;
}

bool MemberLoop::TakeBack() {
  const absl::StatusOr<bool> replaced = channel_.TakeBack(
      keep_alive_, phase() != Phase::kFailed && !session_.empty());
  if (!replaced.ok()) {
    Handle(replaced.status());
    return channel_.connected();
  }
  if (*replaced) rebalance_now_ = true;
  return true;
}

void MemberLoop::WaitForWork(absl::Time until) {
  const absl::StatusOr<bool> replaced = channel_.WaitForWork(
      until, keep_alive_, phase() != Phase::kFailed && !session_.empty(),
      [this] {
        return StopRequested() || rebalance_now_ || schema_.changed();
      });
  if (!replaced.ok()) {
    Handle(replaced.status());
  } else if (*replaced) {
    rebalance_now_ = true;
  }
}

void MemberLoop::SleepUnlessStopped(absl::Duration d) {
  stop_wakeup_.WaitFor(d);
}

bool MemberLoop::HeartbeatIfDue() {
  if (channel_.connected() && !session_.empty() &&
      absl::Now() >= keeper_.next_heartbeat()) {
    Heartbeat();
  }
  return channel_.connected() && !session_.empty() && phase() != Phase::kFailed;
}

void MemberLoop::Handle(const absl::Status& s) {
  if (s.ok()) return;
  // The group is gone, the schema is wrong or we may not use it: retrying
  // cannot help, so the member stops and says why.
  if (absl::IsNotFound(s) || absl::IsFailedPrecondition(s) ||
      absl::IsPermissionDenied(s)) {
    const absl::Status said = internal::WithGrantHint(s, config_.channel.dsn,
                                                      "member", config_.group);
    log_->error("group={} {}", config_.group, std::string(said.message()));
    rebalancer_.Forget(session_);
    scheduler_.Shutdown();
    {
      absl::MutexLock lock(&mu_);
      fatal_ = said;
    }
    SetPhase(Phase::kFailed);
    return;
  }
  if (absl::IsUnavailable(s) || absl::IsUnknown(s)) {
    channel_.Disconnect(s);
    return;
  }
  log_->warn("group={} session={} {}", config_.group, session_,
             std::string(s.message()));
}

void MemberLoop::CheckSchema() { Handle(schema_.Check(session_)); }

bool MemberLoop::Join() {
  // The calls of a lost session were cut off, but may take a moment to
  // end (an exec child dies after its kill): a member is live again only
  // once none runs, else its old call on an item would overlap the item's
  // next owner's while both members are live (invariant 10; chaos seed 1
  // of the slow profile: a new session 7 ms after the cut, the cut call's
  // last line 10 ms after that). Meanwhile the workers may use the
  // control connection to settle.
  if (scheduler_.AnyBusy()) {
    if (!waiting_for_calls_) {
      log_->info(
          "group={} handler calls of the lost session still run on parts "
          "{}: joining again once they return",
          config_.group, absl::StrJoin(scheduler_.BusyParts(), ","));
    }
    waiting_for_calls_ = true;
    channel_.LendForDrain(kDrainCheck);
    return true;
  }
  waiting_for_calls_ = false;
  // The schema as it is now, not as when the member started or last heard
  // (a forced migration may have ended the session): whether it may join,
  // and whether its session records its version.
  CheckSchema();
  if (phase() == Phase::kFailed) return false;
  if (!channel_.connected()) return true;
  if (IsStatic() && rejoined_after_loss_) {
    // A static member whose session is gone was replaced by a newer process
    // with its instance name, or expired. Replaced, it must not take the
    // place back (two processes with one name would flap): it stops.
    auto holder = store_.StaticHolder(config_.group, config_.session.instance);
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
  store::SessionInfo info = config_.session;
  info.record_version = schema_.RecordsVersion();
  if (schema_.KeepsSecrets()) info.secret = internal::NewSessionSecret();
  auto id = store_.RegisterSession(config_.group, info, config_.use_notify);
  if (!id.ok()) {
    Handle(id.status());
    if (phase() == Phase::kFailed) return false;
    SleepUnlessStopped(
        Backoff(++join_failures_, absl::Milliseconds(100), absl::Seconds(5)));
    return true;
  }
  join_failures_ = 0;
  session_ = id->session;
  schema_.Joined(info.record_version);
  channel_.SetSession(session_);
  rebalancer_.NoteJoined(id->replaced);
  keeper_.Started(session_, settings_);
  rebalance_now_ = true;
  SetPhase(Phase::kActive);
  PublishSession();
  // Before the first membership read, so no part freed for this session
  // goes unheard.
  Handle(channel_.ListenForSession());
  if (!channel_.connected()) return true;  // the LISTEN found it broken
  // Housekeeping: a failure only delays the trim, it must not stop the
  // member (a broken connection shows again at the next heartbeat).
  const auto pruned =
      store_.PruneOwnershipLog(config_.group, kOwnershipHistory, kPruneBatch);
  if (!pruned.ok()) {
    log_->warn("group={} session={} ownership log not trimmed: {}",
               config_.group, session_, std::string(pruned.status().message()));
  }
  return true;
}

void MemberLoop::Adopt(const store::GroupSettings& settings) {
  if (config_.shared_heartbeat && settings.ttl != settings_.ttl) {
    config_.shared_heartbeat->Attach(settings.ttl);
    config_.shared_heartbeat->Detach(settings_.ttl);
  }
  const bool resized = settings.parts != settings_.parts;
  settings_ = settings;
  channel_.SetTtl(settings_.ttl);
  keeper_.Follow(settings_);
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
  auto answer = keeper_.Heartbeat();
  if (!answer.ok()) {
    Handle(answer.status());
    return;
  }
  if (!answer->has_value()) {
    // Expired or reaped. Unless the group itself is gone, start over.
    auto group = store_.ReadGroup(config_.group);
    if (!group.ok()) {
      Handle(group.status());
      if (phase() == Phase::kFailed) return;
    }
    LoseSession("session expired or was reaped");
    return;
  }
  Adopt((*answer)->settings);
  // Someone joined or left without a NOTIFY (or it was missed).
  const std::optional<std::string>& membership = (*answer)->membership;
  if (membership && *membership != rebalancer_.last_membership()) {
    rebalance_now_ = true;
  }
}

void MemberLoop::Reap() {
  auto reaped = keeper_.Reap();
  if (!reaped.ok()) {
    Handle(reaped.status());
    return;
  }
  if (!reaped->empty()) {
    log_->info("group={} session={} reaped expired session(s) {}",
               config_.group, session_, absl::StrJoin(*reaped, ","));
    rebalancer_.NoteReaped();
    rebalance_now_ = true;
  }
}

void MemberLoop::Rebalance() {
  const absl::Time now = absl::Now();
  rebalance_now_ = false;
  // While listening, NOTIFYs and the heartbeats' fingerprint of the live
  // members cover every change: the periodic read is only a safety net,
  // spread by +-20% so the members that rebalanced together do not all
  // re-read together.
  next_rebalance_ =
      now + (channel_.listening() ? config_.rebalance_poll_listening *
                                        absl::Uniform(jitter_, 0.8, 1.2)
                                  : config_.rebalance_poll);
  auto view = store_.ReadGroupView(config_.group, session_);
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
  if (view->expired_sessions > 0) keeper_.SawExpired();
  std::shared_ptr<const Assignor> assignor = config_.assignor;
  if (!assignor) assignor = AssignorNamed(settings_.assignor);
  if (!assignor) {
    // Assigning otherwise than the others could take a part another
    // member is meant to own: leave (the parts move at once), then stop.
    const absl::Status left =
        store_.LeaveSession(config_.group, session_, config_.use_notify);
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
  Follow(rebalancer_.Rebalance(session_, *view, *assignor, now,
                               [this] { return HeartbeatIfDue(); }));
}

void MemberLoop::FinishDrains() {
  if (rebalancer_.draining()) Follow(rebalancer_.FinishDrains(session_));
}

void MemberLoop::Follow(absl::StatusOr<Rebalancer::Again> again) {
  if (!again.ok()) {
    Handle(again.status());
    // A statement failed half-way: try again soon, as when waiting for
    // others to let go.
    if (phase() == Phase::kFailed) return;
    again = Rebalancer::Again::kSoon;
  }
  switch (*again) {
    case Rebalancer::Again::kNow:
      rebalance_now_ = true;
      break;
    case Rebalancer::Again::kSoon:
      // Waiting for others to let go: they NOTIFY when they do, but keep
      // polling briskly in case that is missed or unsupported.
      next_rebalance_ =
          std::min(next_rebalance_, absl::Now() + config_.rebalance_poll / 5);
      break;
    case Rebalancer::Again::kWhenDue:
      break;
  }
}

void MemberLoop::LoseSession(const std::string& why) {
  metrics_.SessionLost();
  rejoined_after_loss_ = true;
  rebalancer_.LoseAll(session_, why);
  channel_.StopListeningForSession();
  SetPhase(Phase::kJoining);
  session_.clear();
  channel_.SetSession(session_);
  keeper_.Ended();
  PublishSession();
}

void MemberLoop::ReportConnections() {
  Handle(connections_.Report(session_, static_cast<int>(metrics_.connections()),
                             config_.channel.budget->limit()));
}

void MemberLoop::Leave() {
  SetPhase(Phase::kLeaving);
  const absl::Time since = absl::Now();
  std::vector<int> marked;
  Handle(rebalancer_.RevokeAll(session_, since, &marked));
  // The session and its parts stay until every handler call returned: a
  // part released under a running call would start its item elsewhere.
  bool cut = false;
  if (scheduler_.AnyBusy()) {
    log_->info(
        "group={} session={} leaving once the handler calls in flight "
        "return (cut off after {}, drain_timeout)",
        config_.group, session_,
        absl::FormatDuration(config_.rebalance.drain_timeout));
  }
  while (scheduler_.AnyBusy()) {
    if (absl::Now() >= since + config_.rebalance.drain_timeout) {
      rebalancer_.CutOffAll(session_, /*say=*/!cut);
      cut = true;
    }
    // In-flight acks are fenced on this session being alive: keep it so.
    if (keeper_.DrainBeatDue(absl::Now()) && EnsureConnected()) {
      Handle(keeper_.DrainBeat().status());
    }
    // The items in flight may be on the control connection.
    channel_.LendForDrain(kDrainCheck);
    TakeBack();
  }
  rebalancer_.FinishLeave(session_);
  scheduler_.Shutdown();
  if (!session_.empty() && IsStatic() && !leave_for_good_ &&
      EnsureConnected()) {
    // Keeps its place and its parts for the static timeout: a restart with
    // the same name within it moves nothing. They wait, not hand over.
    Handle(rebalancer_.Unmark(session_, marked));
    absl::Status s =
        store_.StepAway(config_.group, session_, config_.use_notify);
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
  } else if (!session_.empty() && EnsureConnected()) {
    absl::Status s =
        store_.LeaveSession(config_.group, session_, config_.use_notify);
    if (s.ok()) {
      log_->info("group={} session={} left the group", config_.group, session_);
    } else {
      log_->warn(
          "group={} session={} could not delete its session ({}); it "
          "expires after the TTL",
          config_.group, session_, std::string(s.message()));
    }
  }
  rebalancer_.Forget(session_);
  SetPhase(Phase::kLeft);
  session_.clear();
  channel_.SetSession(session_);
  keeper_.Ended();
  PublishSession();
}

}  // namespace sqlgroup
