#include "member/rebalancer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "keyspace.h"
#include "member/rebalance_plan.h"
#include "spdlog/spdlog.h"
#include "status_macros.h"

namespace sqlgroup {
namespace {

std::string Parts(const std::vector<int>& parts) {
  return absl::StrCat("[", absl::StrJoin(parts, ","), "]");
}

// The member that reports the group's dead letters and pauses: the first
// live session in lexical order that is not an away static member's (whose
// process has stopped), so that exactly one running member does.
std::string GroupReporter(const store::GroupView& view) {
  for (const std::string& session : view.live_sessions) {
    auto instance = view.static_instances.find(session);
    if (instance != view.static_instances.end() &&
        view.away_until.count(instance->second)) {
      continue;
    }
    return session;
  }
  return "";
}

std::vector<int> Keys(const std::map<int, int64_t>& m) {
  std::vector<int> keys;
  for (const auto& [k, v] : m) keys.push_back(k);
  return keys;
}

}  // namespace

Rebalancer::Rebalancer(RebalancerConfig config, store::MembershipStore& store,
                       PartScheduler& scheduler, MemberMetrics& metrics,
                       std::shared_ptr<spdlog::logger> logger)
    : config_(std::move(config)),
      store_(store),
      scheduler_(scheduler),
      metrics_(metrics),
      log_(std::move(logger)) {}

// Why the target changed: this member rejoined after losing its session,
// the group's part count changed, a static member came back to its place
// (this one or another), someone joined, someone was reaped (expired), or
// someone left.
std::string Rebalancer::RebalanceReason(const store::GroupView& view) const {
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

absl::StatusOr<Rebalancer::Again> Rebalancer::Rebalance(
    const std::string& session, const store::GroupView& view,
    const Assignor& assignor, absl::Time now,
    const std::function<bool()>& keep_alive) {
  group_parts_ = view.settings.parts;
  if (layout_parts_ != group_parts_) {
    if (!scheduler_.Parts().empty()) {
      return ChangeLayout(session, view, group_parts_, now, keep_alive);
    }
    resizing_ = layout_parts_ != 0;
    layout_parts_ = group_parts_;
  }
  assignment_ = AssignMembers(assignor, view, session, group_parts_);
  const RebalancePlan plan = PlanRebalance(session, assignment_, view.ownership,
                                           scheduler_.Parts(), RevokingParts());
  metrics_.Members(static_cast<int>(view.live_sessions.size()));
  metrics_.Parts(group_parts_);
  if (plan.target != last_target_) {
    rebalance_reason_ = RebalanceReason(view);
    metrics_.RebalanceStarted(rebalance_reason_);
    rejoined_after_loss_ = false;
    returned_ = false;
    // A part-count change is timed from when its drain began.
    if (!resizing_ || !rebalance_started_) rebalance_started_ = now;
    resizing_ = false;
    log_->info("group={} session={} {} live member(s); target parts {}",
               config_.group, session, view.live_sessions.size(),
               Parts(plan.target));
    last_target_ = plan.target;
  }
  last_live_ = view.live_sessions;
  last_static_ = view.static_instances;
  last_membership_ = view.membership;
  metrics_.StaticAway(view.away_until);
  ReportGroup(GroupReporter(view) == session);
  reaped_since_rebalance_ = false;
  if (!plan.lost.empty()) {
    // Their acks will be refused, and another member may run the items
    // now: the calls on them end at once.
    CutOff(session, BusyOf(plan.lost), "on parts taken from it", true);
    Move(session, plan.lost, PartState::kGone, now);
    for (int part : plan.lost) scheduler_.Remove(part);
    log_->warn("group={} session={} parts {} lost", config_.group, session,
               Parts(plan.lost));
    CallListener(session, "OnPartsLost", &RebalanceListener::OnPartsLost,
                 plan.lost);
  }
  Move(session, Keys(plan.adopt), PartState::kRunning, now);
  for (const auto& [part, epoch] : plan.adopt) {
    scheduler_.Add({config_.group, session, part, epoch},
                   PartRange(part, layout_parts_));
  }
  Move(session, plan.revoke, PartState::kRevoking, now);
  for (int part : plan.revoke) scheduler_.Revoke(part);
  Move(session, plan.unrevoke, PartState::kRunning, now);
  for (int part : plan.unrevoke) scheduler_.Unrevoke(part);
  // What the database holds for this member once the statements below
  // ran: the plan made again over it says whether the target is reached.
  store::Ownership after = view.ownership;
  // Each statement below is bounded by TTL/4; the heartbeat must not wait
  // for all of them.
  if (!keep_alive()) return Again::kWhenDue;
  // Idle ones are dropped at once.
  RETURN_IF_ERROR(MarkRevoking(session, BusyOf(plan.revoke), true));
  RETURN_IF_ERROR(MarkRevoking(session, plan.unrevoke, false));
  if (!plan.drop_now.empty()) {
    ASSIGN_OR_RETURN(const std::vector<int> dropped,
                     store_.DropParts(config_.group, session, plan.drop_now,
                                      layout_parts_, config_.use_notify,
                                      TargetsOf(session, plan.drop_now)));
    for (int part : dropped) after.mine.erase(part);
  }
  if (!keep_alive()) return Again::kWhenDue;
  if (!plan.take.empty()) {
    ASSIGN_OR_RETURN(const auto taken, Take(session, plan.take));
    after.mine.insert(taken.begin(), taken.end());
  }
  if (!keep_alive()) return Again::kWhenDue;
  ASSIGN_OR_RETURN(const std::vector<int> released, Drain(session));
  for (int part : released) after.mine.erase(part);
  const bool converged =
      revoking_.empty() && PlanRebalance(session, assignment_, after,
                                         scheduler_.Parts(), RevokingParts())
                               .converged;
  if (converged && rebalance_started_) {
    const absl::Duration took = absl::Now() - *rebalance_started_;
    metrics_.RebalanceDone(took);
    log_->info("group={} session={} rebalance done in {:.1f} ms, owning {}",
               config_.group, session, absl::ToDoubleMilliseconds(took),
               Parts(Keys(scheduler_.Parts())));
    rebalance_started_.reset();
  }
  Publish(session);
  if (!released.empty()) return Again::kNow;
  // Not converged: waiting for others to let go. They NOTIFY when they
  // do, but the member polls briskly in case that is missed.
  return converged ? Again::kWhenDue : Again::kSoon;
}

absl::StatusOr<std::map<int, int64_t>> Rebalancer::Take(
    const std::string& session, const std::vector<int>& parts) {
  ASSIGN_OR_RETURN(
      const std::vector<store::Owner> taken,
      store_.TakeParts(config_.group, session, parts, layout_parts_));
  std::map<int, int64_t> epochs;
  if (taken.empty()) return epochs;
  std::vector<int> of_the_dead;
  std::vector<int> parts_taken;
  for (const store::Owner& o : taken) parts_taken.push_back(o.part);
  Move(session, parts_taken, PartState::kRunning, absl::Now());
  for (const store::Owner& o : taken) {
    scheduler_.Add({config_.group, session, o.part, o.epoch},
                   PartRange(o.part, layout_parts_), o.predecessor_died_at);
    epochs[o.part] = o.epoch;
    if (o.predecessor_died_at) of_the_dead.push_back(o.part);
  }
  if (!of_the_dead.empty()) {
    log_->info(
        "group={} session={} parts {} come from a member that died: the "
        "items it may have been running count an attempt as they are "
        "handed out again",
        config_.group, session, Parts(of_the_dead));
  }
  metrics_.PartsTaken(static_cast<int>(parts_taken.size()), rebalance_reason_);
  log_->info("group={} session={} took parts {}", config_.group, session,
             Parts(parts_taken));
  CallListener(session, "OnPartsAssigned", &RebalanceListener::OnPartsAssigned,
               parts_taken);
  return epochs;
}

// The group's part count changed (group alter --parts): every part this
// member runs stands for a range of the old layout. It drains and drops
// them all before it takes any of the new layout (whose numbers mean other
// ranges); the database refuses a new take while an overlapping old one
// exists, so members that see the change at different times never run
// overlapping ranges. Wakes every member when it drops: any of them may be
// waiting for these ranges.
absl::StatusOr<Rebalancer::Again> Rebalancer::ChangeLayout(
    const std::string& session, const store::GroupView& view, int new_parts,
    absl::Time now, const std::function<bool()>& keep_alive) {
  const std::map<int, int64_t> running = scheduler_.Parts();
  if (!resizing_) {
    resizing_ = true;
    rebalance_started_ = now;
    last_target_.clear();
    log_->info(
        "group={} session={} the group's part count changed from {} to {}: "
        "draining parts {} of the old layout before taking new ones",
        config_.group, session, layout_parts_, new_parts, Parts(Keys(running)));
  }
  last_live_ = view.live_sessions;
  last_static_ = view.static_instances;
  last_membership_ = view.membership;
  const std::vector<int> revoked = RevokeRunning(session, now);
  if (!keep_alive()) return Again::kWhenDue;
  RETURN_IF_ERROR(MarkRevoking(session, BusyOf(revoked), true));
  RETURN_IF_ERROR(Drain(session).status());
  // Once none is left, the new layout's parts are taken at once.
  return scheduler_.Parts().empty() ? Again::kNow : Again::kSoon;
}

std::vector<std::string> Rebalancer::TargetsOf(
    const std::string& session, const std::vector<int>& parts) const {
  if (layout_parts_ != group_parts_) {
    // Old-layout parts: whoever is meant to run their ranges now.
    std::vector<std::string> others;
    for (const std::string& s : last_live_) {
      if (s != session) others.push_back(s);
    }
    return others;
  }
  std::set<std::string> targets;
  for (int part : parts) {
    if (part < static_cast<int>(assignment_.owner.size())) {
      targets.insert(assignment_.sessions[assignment_.owner[part]]);
    }
  }
  targets.erase(session);
  return {targets.begin(), targets.end()};
}

void Rebalancer::CallListener(
    const std::string& session, const char* name,
    void (RebalanceListener::*callback)(const std::vector<int>&),
    const std::vector<int>& parts) {
  if (!config_.listener) return;
  // The user's code runs on the control thread: an exception must neither
  // end the thread (and the process) nor stop the rebalance half-way.
  try {
    (config_.listener->*callback)(parts);
  } catch (const std::exception& e) {
    log_->error("group={} session={} RebalanceListener::{}({}) threw: {}",
                config_.group, session, name, Parts(parts), e.what());
  } catch (...) {
    log_->error("group={} session={} RebalanceListener::{}({}) threw",
                config_.group, session, name, Parts(parts));
  }
}

std::vector<int> Rebalancer::RevokeRunning(const std::string& session,
                                           absl::Time now) {
  std::vector<int> revoked;
  for (const auto& [part, epoch] : scheduler_.Parts()) {
    if (!revoking_.count(part)) revoked.push_back(part);
  }
  Move(session, revoked, PartState::kRevoking, now);
  for (int part : revoked) scheduler_.Revoke(part);
  return revoked;
}

const char* PartStateName(Rebalancer::PartState state) {
  // In the enum's order.
  static constexpr const char* kNames[] = {"gone", "running", "revoking",
                                           "cutting-off"};
  return kNames[static_cast<int>(state)];
}

void Rebalancer::Move(const std::string& session, const std::vector<int>& parts,
                      PartState to, absl::Time now) {
  if (parts.empty()) return;
  const std::map<int, int64_t> running = scheduler_.Parts();
  std::map<PartState, std::vector<int>> from;
  for (int part : parts) {
    auto it = revoking_.find(part);
    const PartState state =
        it != revoking_.end()
            ? (it->second.cut_off ? PartState::kCuttingOff
                                  : PartState::kRevoking)
            : (running.count(part) ? PartState::kRunning : PartState::kGone);
    if (state == to) continue;
    from[state].push_back(part);
    switch (to) {
      case PartState::kRevoking:
        revoking_[part] = {now};
        break;
      case PartState::kCuttingOff:
        revoking_[part].cut_off = true;
        break;
      case PartState::kRunning:
      case PartState::kGone:
        revoking_.erase(part);
        break;
    }
  }
  if (!log_->should_log(spdlog::level::debug)) return;
  for (const auto& [state, moved] : from) {
    log_->debug("group={} session={} parts {} {} -> {}", config_.group, session,
                Parts(moved), PartStateName(state), PartStateName(to));
  }
}

std::set<int> Rebalancer::RevokingParts() const {
  std::set<int> parts;
  for (const auto& [part, revoke] : revoking_) parts.insert(part);
  return parts;
}

absl::Status Rebalancer::MarkRevoking(const std::string& session,
                                      const std::vector<int>& parts,
                                      bool revoking) {
  if (parts.empty()) return absl::OkStatus();
  const absl::Status s = store_.MarkRevoking(config_.group, session, parts,
                                             layout_parts_, revoking);
  // Only describe reads the mark: a failure changes nothing of the
  // handover, unless the connection is gone.
  if (s.ok() || absl::IsUnavailable(s)) return s;
  log_->warn("group={} session={} could not mark parts {} as {}: {}",
             config_.group, session, Parts(parts),
             revoking ? "revoking" : "kept", std::string(s.message()));
  return absl::OkStatus();
}

std::vector<int> Rebalancer::BusyOf(const std::vector<int>& parts) const {
  std::vector<int> busy;
  for (int part : parts) {
    if (scheduler_.Busy(part)) busy.push_back(part);
  }
  return busy;
}

void Rebalancer::CutOff(const std::string& session,
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

absl::StatusOr<Rebalancer::Again> Rebalancer::FinishDrains(
    const std::string& session) {
  ASSIGN_OR_RETURN(const std::vector<int> released, Drain(session));
  // See whether the target is complete now.
  return released.empty() ? Again::kWhenDue : Again::kNow;
}

absl::StatusOr<std::vector<int>> Rebalancer::Drain(const std::string& session) {
  const absl::Time now = absl::Now();
  std::vector<int> ready;
  std::vector<int> overdue;
  std::vector<int> cut_before;
  for (const auto& [part, revoke] : revoking_) {
    // Never while a handler call on the part runs: its next owner would
    // start the same item while this one is still on it.
    if (!scheduler_.Busy(part)) {
      ready.push_back(part);
    } else if (now >= revoke.since + config_.drain_timeout) {
      (revoke.cut_off ? cut_before : overdue).push_back(part);
    }
  }
  Move(session, overdue, PartState::kCuttingOff, now);
  const std::string after = absl::StrCat(
      "since their revoke, ", absl::FormatDuration(config_.drain_timeout),
      " (drain_timeout) ago, and move only once those return");
  CutOff(session, overdue, after.c_str(), true);
  // Again for calls that began since (a batch's next item).
  CutOff(session, cut_before, "", false);
  if (ready.empty()) return ready;
  CallListener(session, "OnPartsRevoked", &RebalanceListener::OnPartsRevoked,
               ready);
  RETURN_IF_ERROR(store_
                      .DropParts(config_.group, session, ready, layout_parts_,
                                 config_.use_notify, TargetsOf(session, ready))
                      .status());
  for (int part : ready) {
    metrics_.HandoverWaited(now - revoking_[part].since);
  }
  Move(session, ready, PartState::kGone, now);
  for (int part : ready) scheduler_.Remove(part);
  log_->info("group={} session={} dropped parts {}", config_.group, session,
             Parts(ready));
  Publish(session);
  return ready;
}

void Rebalancer::LoseAll(const std::string& session, const std::string& why) {
  rejoined_after_loss_ = true;
  const std::vector<int> parts = Keys(scheduler_.Parts());
  log_->warn("group={} session={} lost: {}; parts {} are void, rejoining",
             config_.group, session, why, Parts(parts));
  // Their acks will be refused, and another member may run the items
  // now: the calls on them end at once.
  CutOff(session, BusyOf(parts), "of a lost session", true);
  Move(session, parts, PartState::kGone, absl::Now());
  for (int part : parts) scheduler_.Remove(part);
  ReportGroup(false);  // until the new session's first rebalance
  last_target_.clear();
  rebalance_started_.reset();
  if (!parts.empty()) {
    CallListener(session, "OnPartsLost", &RebalanceListener::OnPartsLost,
                 parts);
  }
}

absl::Status Rebalancer::RevokeAll(const std::string& session, absl::Time now,
                                   std::vector<int>* marked) {
  const std::vector<int> revoked = RevokeRunning(session, now);
  Publish(session);
  *marked = BusyOf(revoked);
  if (session.empty()) return absl::OkStatus();
  return MarkRevoking(session, *marked, true);
}

void Rebalancer::CutOffAll(const std::string& session, bool say) {
  CutOff(session, scheduler_.BusyParts(),
         "as the member stops, past its drain_timeout", say);
}

void Rebalancer::FinishLeave(const std::string& session) {
  for (const auto& [part, revoke] : revoking_) {
    metrics_.HandoverWaited(absl::Now() - revoke.since);
  }
  const std::vector<int> parts = Keys(scheduler_.Parts());
  if (!parts.empty()) {
    CallListener(session, "OnPartsRevoked", &RebalanceListener::OnPartsRevoked,
                 parts);
  }
}

absl::Status Rebalancer::Unmark(const std::string& session,
                                const std::vector<int>& parts) {
  return MarkRevoking(session, parts, false);
}

void Rebalancer::Forget(const std::string& session) {
  const std::vector<int> parts = Keys(scheduler_.Parts());
  Move(session, parts, PartState::kGone, absl::Now());
  for (int part : parts) scheduler_.Remove(part);
  ReportGroup(false);
  Publish(session);
}

void Rebalancer::ReportGroup(bool yes) {
  metrics_.ReportsGroup(yes);
  scheduler_.ReportGroup(yes);
}

void Rebalancer::Publish(const std::string& session) {
  metrics_.Owned(session, scheduler_.Parts());
  metrics_.PartsRevoking(static_cast<int>(revoking_.size()));
}

}  // namespace sqlgroup
