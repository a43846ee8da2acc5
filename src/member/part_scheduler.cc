#include "member/part_scheduler.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "key_placement.h"
#include "member/backoff.h"

namespace sqlgroup {

PartScheduler::PartScheduler(absl::Duration idle_poll,
                             absl::Duration lag_interval,
                             absl::Duration idle_poll_listening,
                             absl::Duration warm_for)
    : idle_poll_(idle_poll),
      lag_interval_(lag_interval),
      idle_poll_listening_(std::max(idle_poll, idle_poll_listening)),
      warm_for_(warm_for),
      last_probe_(absl::Now()),
      last_lag_(absl::Now()) {}

void PartScheduler::Enqueue(int part, Entry& e) {
  if (e.revoked) return;
  if (e.offers) {
    // Offered items go out while other workers hold the part's other keys;
    // a claim waits for the one that is out, and for a rest to end.
    if (e.offered.empty() && e.rest_until > absl::Now()) return;
    if (e.offered.empty() && e.claiming) {
      e.claim_again = true;
      return;
    }
  } else if (InFlight(part) > 0) {
    return;  // one worker per part (or per take, while an old one ends)
  }
  if (e.queued) return;
  e.queued = true;
  run_queue_.push_back(part);
}

bool PartScheduler::Idle(int part, const Entry& e, absl::Time now) const {
  // Under per-key order (offers), workers on other keys' items leave the
  // part idle for a probe once no claim is out: a slow key holds up only
  // itself, and its part's other keys whose items fall due meanwhile (a
  // retry, a delayed item) are found by the probe, not after the slow
  // item.
  const bool unclaimed = e.offers ? !e.claiming : InFlight(part) == 0;
  return !e.queued && !e.revoked && unclaimed && e.offered.empty() &&
         now >= e.rest_until;
}

int PartScheduler::InFlight(int part) const {
  auto it = in_flight_.find(part);
  return it == in_flight_.end() ? 0 : it->second;
}

void PartScheduler::Left(int part) {
  auto it = in_flight_.find(part);
  if (it != in_flight_.end() && --it->second == 0) in_flight_.erase(it);
}

void PartScheduler::DropOffered(Entry& e) {
  for (const Entry::Offered& o : e.offered) e.keys.erase(BlockOf(o.item));
  e.offered.clear();
}

void PartScheduler::Add(const store::ClaimRef& ref, KeyRange range,
                        std::optional<absl::Time> predecessor_died_at) {
  absl::MutexLock lock(&mu_);
  // A new take starts idle: one probe finds which of the parts just taken
  // have work, instead of a claim query per part (a member taking 4,096
  // parts would otherwise make 4,096 of them).
  auto old = parts_.find(ref.part);
  if (old != parts_.end()) ranges_.Erase(ref.part, old->second.range);
  parts_[ref.part] = Entry{ref, range, range.first};
  parts_[ref.part].predecessor_died_at = predecessor_died_at;
  if (predecessor_died_at) {
    parts_[ref.part].dead_counted = std::make_shared<DeadCounted>();
  }
  ranges_.Insert(ref.part, range);
  wake_ = true;
}

void PartScheduler::Revoke(int part) {
  absl::MutexLock lock(&mu_);
  auto it = parts_.find(part);
  if (it == parts_.end()) return;
  it->second.revoked = true;
  // Items not yet with a handler stay in the table for the next owner.
  DropOffered(it->second);
  it->second.claimed.clear();
}

void PartScheduler::Unrevoke(int part) {
  absl::MutexLock lock(&mu_);
  auto it = parts_.find(part);
  if (it == parts_.end() || !it->second.revoked) return;
  it->second.revoked = false;
  Enqueue(part, it->second);
}

void PartScheduler::Remove(int part) {
  absl::MutexLock lock(&mu_);
  auto it = parts_.find(part);
  if (it == parts_.end()) return;
  ranges_.Erase(part, it->second.range);
  parts_.erase(it);  // a stale run_queue_ entry is skipped in Next()
}

std::map<int, int64_t> PartScheduler::Parts() const {
  absl::MutexLock lock(&mu_);
  std::map<int, int64_t> parts;
  for (const auto& [part, e] : parts_) parts[part] = e.ref.epoch;
  return parts;
}

bool PartScheduler::Busy(int part) const {
  absl::MutexLock lock(&mu_);
  return InFlight(part) > 0;
}

bool PartScheduler::AnyBusy() const {
  absl::MutexLock lock(&mu_);
  // Items only: a probe or a lag measurement only reads, so a leave need
  // not wait for one (a lag query may take up to its 5 s timeout).
  return !in_flight_.empty();
}

std::vector<int> PartScheduler::BusyParts() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> parts;
  for (const auto& [part, workers] : in_flight_) parts.push_back(part);
  return parts;
}

void PartScheduler::SetGate(
    std::function<absl::Time(absl::Time now)> no_work_before) {
  absl::MutexLock lock(&mu_);
  gate_ = std::move(no_work_before);
}

void PartScheduler::GateChanged() {
  absl::MutexLock lock(&mu_);
  ++retimed_;  // waiting workers compute their deadline anew
}

void PartScheduler::WakeIdle() {
  absl::MutexLock lock(&mu_);
  if (!wake_) wake_heard_ = absl::Now();
  wake_ = true;
  // Not NoteWork: items somewhere, so the probe comes at once, even beside
  // parts in the rotation; the short poll counts from it.
  last_work_ = absl::Now();
}

void PartScheduler::WakeParts(const std::vector<KeyRange>& ranges) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  // Found by range (RangeIndex): the cost follows the ranges announced,
  // not the parts owned.
  for (int part : ranges_.Overlapping(ranges)) {
    auto found = parts_.find(part);
    if (found == parts_.end()) continue;  // (the two change together)
    Entry& e = found->second;
    if (e.revoked || e.rest_until > now) continue;
    NoteWork(now);
    if (e.heard == absl::InfinitePast()) e.heard = now;
    // Under offers, Enqueue asks a claim that is out to claim again.
    if (!e.offers && InFlight(part) > 0) {
      e.claim_again = true;
    } else {
      Enqueue(part, e);
    }
  }
}

void PartScheduler::ExpectAt(absl::Time due) {
  absl::MutexLock lock(&mu_);
  ExpectAtLocked(due);
}

void PartScheduler::ExpectAtLocked(absl::Time due) {
  // A member without parts has nothing to probe (a take probes anyway).
  if (parts_.empty()) return;
  // Times already past all mean "probe when a part is idle": keep one.
  const auto past = expected_.upper_bound(absl::Now());
  if (past != expected_.begin()) {
    expected_.erase(std::next(expected_.begin()), past);
  }
  // Due times this close share one probe, at the later of them (never
  // early): the retries of one batch, a soonest item seen by every probe.
  auto near = expected_.lower_bound(due - kExpectMerge);
  if (near != expected_.end() && *near <= due + kExpectMerge) {
    if (*near >= due) return;
    expected_.erase(near);
  } else if (expected_.size() >= kMaxExpected) {
    // Forget the latest: a probe before it re-reads the soonest, and the
    // idle poll covers the rest.
    if (due > *expected_.rbegin()) return;
    expected_.erase(std::prev(expected_.end()));
  }
  const bool earliest = expected_.empty() || due < *expected_.begin();
  expected_.insert(due);
  if (earliest) ++retimed_;  // waiting workers' deadlines may be too late
}

void PartScheduler::SetListening(bool listening) {
  absl::MutexLock lock(&mu_);
  if (listening && !listening_) wake_ = true;
  listening_ = listening;
}

absl::Duration PartScheduler::ProbeInterval(absl::Time now) const {
  return Cold(now) ? idle_poll_listening_ : idle_poll_;
}

bool PartScheduler::Cold(absl::Time now) const {
  return listening_ && now - last_work_ >= warm_for_;
}

void PartScheduler::NoteWork(absl::Time now) {
  if (warm_for_ > absl::ZeroDuration() && Cold(now)) {
    warmed_at_ = now;
    ++retimed_;  // workers waiting in Next() for the rare poll wait less
  }
  last_work_ = now;
}

absl::Time PartScheduler::NextPoll(absl::Time now) const {
  // Never later than the rare poll after the last probe: warm spells that
  // end before their first short poll do not put it off.
  return std::min(std::max(last_probe_, warmed_at_) + ProbeInterval(now),
                  last_probe_ + idle_poll_listening_);
}

void PartScheduler::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

bool PartScheduler::ProbeDue(absl::Time now) const {
  if (probing_) return false;
  // The clock first: Next() asks on every claim, and the scan below is
  // O(owned parts).
  // An expected due time that has come counts like a NOTIFY.
  const bool expected = !expected_.empty() && *expected_.begin() <= now;
  if (!wake_ && !expected && now < NextPoll(now)) {
    return false;
  }
  for (const auto& [part, e] : parts_) {
    if (Idle(part, e, now)) return true;
  }
  return false;
}

// Loops rather than std::any_of with a lambda: clang's lock analysis does
// not see that a lambda runs under mu_.
bool PartScheduler::Rotating() const {
  for (int part : run_queue_) {
    auto it = parts_.find(part);
    if (it != parts_.end() && it->second.queued && !it->second.revoked) {
      return true;
    }
  }
  return false;
}

bool PartScheduler::MeasuresLag() const {
  return lag_interval_ > absl::ZeroDuration() && !parts_.empty();
}

absl::Duration PartScheduler::MeasureInterval() const {
  return lag_interval_ > absl::ZeroDuration() ? lag_interval_
                                              : kGroupFactsInterval;
}

bool PartScheduler::LagDue(absl::Time now) const {
  return (MeasuresLag() || reports_group_) && !measuring_ &&
         now - last_lag_ >= MeasureInterval();
}

// When a periodic task can next fall due without anything else changing
// under mu_ (which re-evaluates the wait by itself). Only tasks that can run
// count: a deadline in the past that leads nowhere would spin.
absl::Time PartScheduler::NextTimedTask() const {
  absl::Time next = absl::InfiniteFuture();
  const absl::Time now = absl::Now();
  // Stops at the first idle part: in an idle member, the first one.
  bool any_idle = false;
  for (const auto& [part, e] : parts_) {
    if (Idle(part, e, now)) {
      any_idle = true;
      break;
    }
  }
  // Warm or cold: a part going cold only delays the probe (Next() then
  // waits again), never brings it forward.
  if (any_idle && !probing_) {
    next = NextPoll(now);
    if (!expected_.empty()) next = std::min(next, *expected_.begin());
  } else if (!probing_) {
    // A resting part is idle again when its rest ends, which is among the
    // due times to come (FinishItem expects it, and ExpectAtLocked keeps
    // it: a full set drops its latest, and a rest ends within 5 s, where
    // due times kExpectMerge apart number at most 50 of kMaxExpected);
    // waking at one of those while no part is idle only waits again. (Not
    // at a past one: no probe would clear it while nothing is idle.)
    auto to_come = expected_.upper_bound(now);
    if (to_come != expected_.end()) next = std::min(next, *to_come);
  }
  if ((MeasuresLag() || reports_group_) && !measuring_) {
    next = std::min(next, last_lag_ + MeasureInterval());
  }
  // Claims that wait for a pause to end.
  if (!run_queue_.empty()) {
    const absl::Time gated = Gated(now);
    if (gated > now) next = std::min(next, gated);
  }
  return next;
}

bool PartScheduler::HasTaskOrRetimed(uint64_t retimed) const {
  return retimed_ != retimed || HasTask();
}

bool PartScheduler::HasTask() const {
  if (shutdown_) return true;
  if (LagDue(absl::Now())) return true;
  if (absl::Now() >= Gated(absl::Now())) {
    for (int part : run_queue_) {
      auto it = parts_.find(part);
      if (it != parts_.end() && it->second.queued) return true;
    }
  }
  return ProbeDue(absl::Now());
}

PartTask PartScheduler::Next(absl::Time idle_at) {
  absl::MutexLock lock(&mu_);
  while (true) {
    // Wake at the latest when a periodic task falls due.
    struct Wait {
      const PartScheduler* scheduler;
      uint64_t retimed;
    } wait{this, retimed_};
    mu_.AwaitWithDeadline(
        absl::Condition(
            +[](Wait* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return w->scheduler->HasTaskOrRetimed(w->retimed);
            },
            &wait),
        std::min(NextTimedTask(), idle_at));
    if (shutdown_) return PartTask{};
    if (absl::Now() >= idle_at && !HasTask()) {
      PartTask idle;
      idle.kind = PartTask::Kind::kIdle;
      return idle;
    }
    if (LagDue(absl::Now())) {
      PartTask task;
      task.kind = PartTask::Kind::kMeasureLag;
      task.group_facts = reports_group_;
      for (const auto& [part, e] : parts_) {
        if (e.revoked || !MeasuresLag()) continue;
        task.probe_parts.push_back(part);
        task.probe_ranges.push_back(e.range);
      }
      measuring_ = true;
      last_lag_ = absl::Now();
      return task;
    }
    // With parts in the rotation, a probe still comes every poll interval:
    // with few workers and one part that always has work, idle parts that
    // got items must not wait for the run queue to empty. When the rotation
    // is empty, a NOTIFY (wake_) probes at once.
    const absl::Time now = absl::Now();
    if (ProbeDue(now) && (now >= NextPoll(now) || !Rotating())) {
      PartTask task;
      task.kind = PartTask::Kind::kProbe;
      if (wake_) task.heard = wake_heard_;
      for (const auto& [part, e] : parts_) {
        if (!Idle(part, e, now)) continue;
        task.probe_parts.push_back(part);
        task.probe_ranges.push_back(e.range);
      }
      probing_ = true;
      wake_ = false;
      last_probe_ = now;
      expected_.erase(expected_.begin(), expected_.upper_bound(now));
      return task;
    }
    while (!run_queue_.empty() && now >= Gated(now)) {
      const int part = run_queue_.front();
      run_queue_.pop_front();
      auto it = parts_.find(part);
      if (it == parts_.end() || !it->second.queued) continue;  // stale
      Entry& e = it->second;
      e.queued = false;
      if (e.revoked) continue;  // revoked while queued
      PartTask task;
      task.ref = e.ref;
      task.range = e.range;
      if (!e.offered.empty()) {
        task.kind = PartTask::Kind::kItem;
        task.item = std::move(e.offered.front().item);
        task.claimed_at = e.offered.front().claimed_at;
        e.offered.pop_front();
        ++in_flight_[part];
        // The rest, or the next claim, behind the other parts' turns.
        if (!e.offered.empty() || e.claim_again) Enqueue(part, e);
        return task;
      }
      if (e.claiming) continue;  // stale: the claim that is out re-queues
      ++in_flight_[part];
      task.kind = PartTask::Kind::kClaim;
      task.cursor = e.cursor;
      task.turn = e.turn;
      task.claimed = std::move(e.claimed);
      task.claimed_at = e.claimed_at;
      e.claimed.clear();
      task.finished = e.finished;
      task.busy_keys.assign(e.keys.begin(), e.keys.end());
      task.heard = e.heard;
      e.heard = absl::InfinitePast();
      // The first pass ends when the sweep wraps: what the dead predecessor
      // may have run was handed out (and counted) by then.
      if (e.cursor < e.pass_cursor) {
        e.predecessor_died_at.reset();
        e.dead_counted.reset();
      }
      e.pass_cursor = e.cursor;
      task.predecessor_died_at = e.predecessor_died_at;
      task.dead_counted = e.dead_counted;
      // This claim reads what came before it; an announcement from now on
      // asks for another.
      e.claim_again = false;
      if (e.offers) e.claiming = true;
      return task;
    }
  }
}

PartScheduler::Entry* PartScheduler::Returned(int part, int64_t epoch) {
  Left(part);
  auto it = parts_.find(part);
  if (it == parts_.end()) return nullptr;
  if (it->second.ref.epoch != epoch) {
    // Re-taken while we worked: the new take starts fresh, and may have
    // waited for this worker.
    Enqueue(part, it->second);
    return nullptr;
  }
  return &it->second;
}

void PartScheduler::FinishClaim(int part, int64_t epoch, bool found,
                                Uuid128 next_cursor, int turn,
                                std::vector<Item> claimed,
                                absl::Time claimed_at) {
  absl::MutexLock lock(&mu_);
  Entry* entry = Returned(part, epoch);
  if (entry == nullptr) return;
  Entry& e = *entry;
  e.claiming = false;
  e.cursor = next_cursor;
  e.turn = turn;
  if (!e.revoked) {
    e.claimed = std::move(claimed);
    e.claimed_at = claimed_at;
  }
  if (found || e.claim_again) {
    if (found) NoteWork(absl::Now());
    Enqueue(part, e);
  }
}

size_t PartScheduler::Offer(int part, int64_t epoch, uint64_t finished,
                            std::vector<Item> items, Uuid128 next_cursor,
                            absl::Time claimed_at) {
  absl::MutexLock lock(&mu_);
  Entry* entry = Returned(part, epoch);
  if (entry == nullptr) return 0;
  Entry& e = *entry;
  e.offers = true;
  e.claiming = false;
  e.cursor = next_cursor;
  e.turn = 0;
  size_t taken = 0;
  for (Item& item : items) {
    const uint64_t key = BlockOf(item);
    auto done = e.finished_at.find(key);
    // Read before its key's last ack committed. That finish asked for the
    // next claim already, unless it asked the part to wait (a broken ack).
    if (done != e.finished_at.end() && done->second > finished) continue;
    if (!e.keys.insert(key).second) continue;  // with a worker already
    e.offered.push_back({std::move(item), claimed_at});
    ++taken;
  }
  // Only claims handed out before a key finished need to know; none is out.
  e.finished_at.clear();
  if (taken > 0) {
    NoteWork(absl::Now());
    e.claim_again = true;  // the sweep goes on past these keys
  }
  if (!e.offered.empty() || e.claim_again) Enqueue(part, e);
  return taken;
}

void PartScheduler::FinishItem(int part, int64_t epoch, const Item& item,
                               bool again) {
  FinishItems(part, epoch, {item}, again);
}

void PartScheduler::FinishItems(int part, int64_t epoch,
                                const std::vector<Item>& items, bool again) {
  absl::MutexLock lock(&mu_);
  Entry* entry = nullptr;
  // Each item was a task of its own: one worker less on the part each.
  for (size_t i = 0; i < items.size(); ++i) entry = Returned(part, epoch);
  if (entry == nullptr || items.empty()) return;
  Entry& e = *entry;
  for (const Item& item : items) {
    const uint64_t key = BlockOf(item);
    e.keys.erase(key);
    e.finished_at[key] = ++e.finished;
  }
  if (!again) {
    // The part rests, whichever worker comes next: the same item would
    // break the same way at once. A probe after the rest finds it again.
    e.rest_until = absl::Now() + Backoff(++e.broken, absl::Milliseconds(100),
                                         absl::Seconds(5));
    ExpectAtLocked(e.rest_until);
    // A claim queued meanwhile waits for the rest too.
    e.claim_again = false;
    if (e.offered.empty()) e.queued = false;
    return;
  }
  e.broken = 0;
  NoteWork(absl::Now());
  e.claim_again = true;  // the key's next item may be due now
  Enqueue(part, e);
}

void PartScheduler::FinishProbe(const std::vector<int>& due, absl::Time heard) {
  absl::MutexLock lock(&mu_);
  probing_ = false;
  if (!due.empty()) NoteWork(absl::Now());
  for (int part : due) {
    auto it = parts_.find(part);
    if (it == parts_.end()) continue;
    if (it->second.heard == absl::InfinitePast()) it->second.heard = heard;
    Enqueue(part, it->second);
  }
}

void PartScheduler::ReportGroup(bool yes) {
  absl::MutexLock lock(&mu_);
  if (reports_group_ == yes) return;
  reports_group_ = yes;
  ++retimed_;  // a member without parts now has a lag task to wait for
}

void PartScheduler::FinishLag() {
  absl::MutexLock lock(&mu_);
  measuring_ = false;
}

void PartScheduler::AbandonProbe() {
  absl::MutexLock lock(&mu_);
  probing_ = false;
}

bool PartScheduler::KeepClaiming(int part, int64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return false;
  auto it = parts_.find(part);
  if (it == parts_.end() || it->second.ref.epoch != epoch ||
      it->second.revoked) {
    return false;
  }
  const absl::Time now = absl::Now();
  if (Rotating() || ProbeDue(now) || LagDue(now)) return false;
  NoteWork(now);
  return true;
}

bool PartScheduler::ShouldYield(int part, int64_t epoch) const {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return true;
  auto it = parts_.find(part);
  return it == parts_.end() || it->second.ref.epoch != epoch ||
         it->second.revoked;
}

}  // namespace sqlgroup
