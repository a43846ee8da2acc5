#include "member/settler.h"

#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "key_placement.h"
#include "member/backoff.h"
#include "spdlog/spdlog.h"

namespace sqlgroup {
namespace {

// For trace lines; 0 for a time that never was.
int64_t UnixMicros(absl::Time t) {
  return t == absl::InfinitePast() ? 0 : absl::ToUnixMicros(t);
}

// After this many conflicts in a row in one member, an item's next
// conflict counts as a failed attempt.
constexpr int kConflictsPerAttempt = 10;
// The first backoff after a conflict, at most (then doubling up to 8x):
// the failures' backoff_initial before its default became 1 s.
constexpr absl::Duration kConflictBackoff = absl::Milliseconds(200);

}  // namespace

Settler::Settler(int index, SettlerConfig config, store::ItemAcks& acks,
                 TaskConnection& connection, PartScheduler& scheduler,
                 MemberMetrics& metrics, std::shared_ptr<spdlog::logger> logger)
    : index_(index),
      config_(std::move(config)),
      acks_(acks),
      connection_(connection),
      scheduler_(scheduler),
      metrics_(metrics),
      log_(std::move(logger)),
      gathered_(config_.kind.in_function()
                    ? static_cast<size_t>(config_.sql_calls_per_commit)
                    : GatheredAcks::kMaxItems) {}

store::ItemAcks& Settler::Acks() {
  if (acks_.CallsOpen() || (config_.kind.in_function() && !gathered_.empty())) {
    SettleGatheredAside();
  }
  return acks_;
}

void Settler::SettleGatheredAside() {
  for (Gathered& g : CommitGatheredNow()) resolved_.push_back(std::move(g));
}

bool Settler::CountDeliveriesOfTheDead(const store::ClaimRef& ref,
                                       absl::Time died_at, DeadCounted* mark,
                                       std::vector<Item>& items) {
  std::optional<Uuid128> through;
  if (mark != nullptr) {
    absl::MutexLock lock(&mark->mu);
    through = mark->through;
  }
  std::vector<std::string> ids;
  ids.reserve(items.size());
  for (const Item& item : items) {
    if (!through || PositionOf(item) > *through) ids.push_back(item.id);
  }
  if (ids.empty()) return true;
  // Once every item up to the last is counted, and each that reached
  // max_attempts dead-lettered: a read of them again only hands them out.
  const Uuid128 last = PositionOf(items.back());
  const auto counted_through_last = [&] {
    if (mark == nullptr) return;
    absl::MutexLock lock(&mark->mu);
    if (!mark->through || *mark->through < last) mark->through = last;
  };
  auto counted = Acks().CountDeliveriesOfTheDead(ref, ids, died_at);
  if (!counted.ok()) {
    if (absl::IsUnavailable(counted.status())) {
      connection_.Disconnect(counted.status());
      return false;
    }
    // Nothing is lost by handing them out uncounted.
    log_->warn(
        "part={} epoch={} could not count the deliveries of its dead "
        "previous owner: {}",
        ref.part, ref.epoch, std::string(counted.status().message()));
    return true;
  }
  if (counted->empty()) {
    counted_through_last();
    return true;
  }
  log_->info(
      "part={} epoch={} {} item(s) were due when the part's previous owner "
      "died: each counts an attempt (its delivery there may have been cut "
      "short)",
      ref.part, ref.epoch, counted->size());
  std::vector<Item> kept;
  kept.reserve(items.size());
  // Keys of this batch whose item died here: the rest of each stays for
  // the next claim, as after a failure (HandleSingly).
  std::set<uint64_t> held;
  bool all_dead_lettered = true;
  for (Item& item : items) {
    if (item.key && held.count(BlockOf(item))) continue;
    auto it = counted->find(item.id);
    if (it == counted->end()) {
      kept.push_back(std::move(item));
      continue;
    }
    item.attempt = it->second + 1;
    if (it->second < config_.max_attempts) {
      kept.push_back(std::move(item));
      continue;
    }
    // A poison item that takes its member down on every delivery ends
    // here instead of being handed out for ever.
    const std::string why = absl::StrCat(
        "delivered ", it->second,
        " time(s) without an outcome: the member running it stopped each "
        "time (crashed, was killed or lost its session)");
    auto dead = Acks().DeadLetter(ref, item.id, why, /*count_attempt=*/false);
    if (!dead.ok() && absl::IsUnavailable(dead.status())) {
      connection_.Disconnect(dead.status());
      return false;
    }
    if (!dead.ok()) all_dead_lettered = false;  // counted again on a re-read
    if (dead.ok() && *dead) {
      metrics_.DeadLettered();
      log_->warn("part={} epoch={} item={} dead-lettered: {}", ref.part,
                 ref.epoch, item.id, why);
    }
    if (KeyOrder() && item.key) held.insert(BlockOf(item));
  }
  items = std::move(kept);
  if (all_dead_lettered) counted_through_last();
  return true;
}

absl::StatusOr<std::set<std::string>> Settler::StillDueIds(
    const store::ClaimRef& ref, const std::vector<Item>& items, size_t from) {
  std::vector<std::string> ids;
  for (size_t i = from; i < items.size(); ++i) ids.push_back(items[i].id);
  auto due = Acks().StillDue(ref, ids);
  if (due.ok()) return due;
  if (absl::IsUnavailable(due.status())) {
    connection_.Disconnect(due.status());
    return due.status();
  }
  log_->warn("part={} epoch={} {}; handing the items out as claimed", ref.part,
             ref.epoch, std::string(due.status().message()));
  return std::set<std::string>(ids.begin(), ids.end());
}

absl::StatusOr<size_t> Settler::DueRunEnd(const store::ClaimRef& ref,
                                          const std::vector<Item>& items,
                                          size_t from) {
  auto due = StillDueIds(ref, items, from);
  if (!due.ok()) return due.status();
  size_t end = from;
  while (end < items.size() && due->count(items[end].id) > 0) ++end;
  if (end < items.size()) {
    log_->debug(
        "part={} epoch={} item {} is no longer due (paused, "
        "cancelled or settled since its claim): claiming again",
        ref.part, ref.epoch, items[end].id);
  }
  return end;
}

Settler::Progress Settler::ProcessItems(const store::ClaimRef& ref,
                                        const std::vector<Item>& items,
                                        absl::Time claimed_at, NextClaim* next,
                                        bool gather) {
  // Items from `due_end` on are not handed out: no longer due when the
  // claim was last read, at `read_at`.
  size_t due_end = items.size();
  absl::Time read_at = claimed_at;
  const auto read_again = [&](size_t from) {
    if (absl::Now() - read_at <= kClaimFreshFor) return true;
    read_at = absl::Now();
    const absl::StatusOr<size_t> end = DueRunEnd(ref, items, from);
    if (end.ok()) due_end = *end;
    return end.ok();
  };
  if (config_.kind.batched) {
    if (scheduler_.ShouldYield(ref.part, ref.epoch)) return {0, false};
    // The batch goes to the handler whole or, when part of it is no
    // longer due, not at all: the sweep claims again from its start.
    if (!read_again(0)) return {0, true};
    if (due_end < items.size()) return {0, false};
    const Outcome o = HandleBatch(ref, items, next);
    if (Settled(o)) return {items.size(), false, o == Outcome::kAcked};
    return {0, o == Outcome::kBroken};
  }
  // The acks gathered are those of the items from `gathered_from` on (the
  // ones since settled). They commit before the sweep moves past them:
  // should that fail, it reads again from the first of them.
  size_t gathered_from = 0;
  const auto commit = [&]() -> std::optional<Progress> {
    for (const Gathered& g : CommitGathered()) {
      if (g.outcome == Outcome::kBroken) return Progress{gathered_from, true};
    }
    return std::nullopt;
  };
  const auto stop = [&](size_t i, bool broken) -> Progress {
    if (std::optional<Progress> failed = commit()) return *failed;
    return {i, broken};
  };
  for (size_t i = 0; i < items.size(); ++i) {
    if (scheduler_.ShouldYield(ref.part, ref.epoch)) return stop(i, false);
    // Borrowed: the control thread's turn, after at least one item.
    if (i > 0 && connection_.YieldControl()) return stop(i, false);
    if (gathered_.Due(absl::Now())) {
      if (std::optional<Progress> failed = commit()) return *failed;
    }
    if (gathered() == 0) gathered_from = i;
    if (!read_again(i)) return stop(i, true);
    if (i >= due_end) return stop(i, false);  // claimed again from it
    const Outcome o = HandleBatch(ref, {items[i]}, nullptr, gather);
    if (o == Outcome::kGathered) continue;
    if (o == Outcome::kBroken) return stop(i, true);
    if (o == Outcome::kRetryLater) return stop(i, false);
    if (o == Outcome::kLost) return stop(i + 1, false);  // the take is gone?
  }
  return stop(items.size(), false);
}

Settler::Outcome Settler::HandleBatch(const store::ClaimRef& ref,
                                      const std::vector<Item>& items,
                                      NextClaim* next, bool gather) {
  std::vector<std::string> ids;
  ids.reserve(items.size());
  for (const Item& item : items) ids.push_back(item.id);
  if (log_->should_log(spdlog::level::trace)) {
    log_->trace("handler worker={} ids={} at={}", index_,
                absl::StrJoin(ids, ","), UnixMicros(absl::Now()));
  }
  // The breaker judges single items only: a failed batch is tried again
  // item by item (HandleSingly), each admitted on its own.
  const bool single = items.size() == 1;
  const CircuitBreaker::Admission admission =
      config_.breaker->Admit(absl::Now());
  if (admission == CircuitBreaker::Admission::kDenied) {
    return Outcome::kRetryLater;  // not handled: still due, for later
  }
  const bool gather_one = gather && single && next == nullptr;
  const Attempt a =
      config_.kind.in_function()
          ? CallInAck(ref, items, ids, next,
                      gather_one && absl::Now() >= grouping_refused_until_)
          : RunAndAck(ref, items, ids, next, gather_one);
  if (a.ended || (a.acking && !a.verdict.ok()) ||
      (!single && !a.verdict.ok())) {
    // No verdict on the handler: another call may probe.
    if (admission == CircuitBreaker::Admission::kProbe) {
      config_.breaker->Abandon();
      scheduler_.GateChanged();
    }
  } else {
    RecordOutcome(ref, a.verdict, items.front().id);
  }
  if (a.ended) return *a.ended;
  if (a.acking && !a.verdict.ok()) {
    log_->error("part={} epoch={} acknowledging {} item(s) failed: {}",
                ref.part, ref.epoch, ids.size(),
                std::string(a.verdict.message()));
    return Outcome::kBroken;  // the transaction rolled back; read again
  }
  if (a.verdict.ok()) {
    config_.conflicts->Forget(ids);
    if (a.gathered) return Outcome::kGathered;
    if (a.deleted == static_cast<int64_t>(ids.size())) {
      metrics_.Acked(a.deleted, absl::Now() - a.ack_start);
      return Outcome::kAcked;
    }
    // Alone, the items it did delete are acknowledged; in a transaction,
    // none are (it rolled back).
    const int64_t acked = a.alone ? a.deleted : 0;
    if (acked > 0) metrics_.Acked(acked, absl::Now() - a.ack_start);
    metrics_.LostClaims(static_cast<int64_t>(ids.size()) - acked);
    log_->warn("part={} epoch={} lost claim on {} item(s): not acknowledged",
               ref.part, ref.epoch, ids.size() - acked);
    return Outcome::kLost;
  }
  if (items.size() > 1) {
    // Isolate the failing item: each again on its own.
    log_->info("part={} epoch={} batch of {} failed ({}); retrying singly",
               ref.part, ref.epoch, items.size(),
               std::string(a.verdict.message()));
    return HandleSingly(ref, items);
  }
  return Fail(ref, items.front(), std::string(a.verdict.message()),
              IsDeadLetterVerdict(a.verdict),
              RetryAfterOf(a.verdict).value_or(absl::ZeroDuration()));
}

void Settler::RecordOutcome(const store::ClaimRef& ref,
                            const absl::Status& verdict,
                            const std::string& item_id) {
  const absl::Time now = absl::Now();
  const auto change = config_.breaker->Record(now, verdict, item_id);
  // The scheduler's gate reads the breaker: workers waiting for it look
  // again (a probe ended, or the circuit closed).
  scheduler_.GateChanged();
  if (!change) return;
  if (change->to == CircuitBreaker::State::kClosed) {
    metrics_.CircuitOpen(false);
    log_->warn(
        "group={} session={} the handler works again after {}: circuit "
        "closed, items flow again",
        config_.group, ref.session,
        absl::FormatDuration(absl::Trunc(change->was_open, absl::Seconds(1))));
  } else {
    const absl::Duration wait =
        absl::Trunc(change->open_until - now, absl::Milliseconds(1));
    if (change->first) {
      metrics_.CircuitOpen(true);
      log_->warn(
          "group={} session={} the handler failed {} items in a row with "
          "errors that say nothing of the items (the last: {}): handing it "
          "no item for {}, then one at a time until one succeeds (circuit "
          "open); the items wait, none is dead-lettered for this",
          config_.group, ref.session, change->failures, change->error,
          absl::FormatDuration(wait));
    } else {
      log_->info(
          "group={} session={} the handler still fails ({}); next try in {}",
          config_.group, ref.session, change->error,
          absl::FormatDuration(wait));
    }
  }
  if (change->first || change->to == CircuitBreaker::State::kClosed) {
    const absl::Status s = Acks().ReportCircuit(
        ref.session, change->to != CircuitBreaker::State::kClosed,
        change->error);
    if (!s.ok()) {
      log_->debug("group={} session={} circuit not recorded for describe: {}",
                  config_.group, ref.session, std::string(s.message()));
    }
  }
}

Settler::Attempt Settler::RunAndAck(const store::ClaimRef& ref,
                                    const std::vector<Item>& items,
                                    const std::vector<std::string>& ids,
                                    NextClaim* next, bool gather) {
  const store::CarriedClaim carry =
      next ? next->Carried(config_.claim_batch) : store::CarriedClaim{};
  // A claim carried needs a statement of its own.
  const bool share =
      (config_.shared_commit != nullptr || gather) && next == nullptr;
  const absl::Time call_start = absl::Now();
  store::HandledAndAcked r = Acks().HandleAndAck(
      ref, ids,
      [&](AckTransaction& ack) {
        return config_.batch_handler ? config_.batch_handler(items, ack)
                                     : config_.handler(items.front(), ack);
      },
      next ? &carry : nullptr, share);
  Attempt a;
  a.verdict = std::move(r.verdict);
  a.acking = r.acking;
  a.deleted = r.deleted;
  a.alone = r.alone;
  a.ack_start = r.ack_start;
  if (r.carried) next->Take(std::move(*r.carried), absl::Now() - a.ack_start);
  if (!r.error.ok()) Failed(a, r.error, ref, items);
  if (r.deferred && gather) {
    gathered_.Add(ref, items.front(), r.ack_start - call_start, r.ack_start);
    a.gathered = true;
  } else if (r.deferred) {
    AckShared(a, ref, ids, items);
  }
  return a;
}

void Settler::AckShared(Attempt& a, const store::ClaimRef& ref,
                        const std::vector<std::string>& ids,
                        const std::vector<Item>& items) {
  std::vector<store::TakeItem> takes;
  takes.reserve(ids.size());
  for (const std::string& id : ids) {
    takes.push_back({id, ref.session, ref.part, ref.epoch});
  }
  a.ack_start = absl::Now();
  absl::Status elsewhere;
  const absl::StatusOr<std::vector<bool>> each =
      DeleteShared(takes, &elsewhere);
  if (!each.ok()) {
    Failed(a, each.status(), ref, items);
    return;
  }
  int64_t deleted = 0;
  for (bool d : *each) deleted += d;
  // Deleting them all again alone, it is their ack (the broken shared
  // statement did not commit them); deleting fewer, some were acknowledged
  // there, and the items still waiting are read again.
  if (elsewhere.ok() || deleted == static_cast<int64_t>(ids.size())) {
    a.deleted = deleted;
    return;
  }
  log_->warn(
      "part={} epoch={} a shared ack of {} item(s) broke on another worker's "
      "connection ({}); reading them again",
      ref.part, ref.epoch, ids.size(), std::string(elsewhere.message()));
  a.ended = Outcome::kBroken;
}

absl::StatusOr<std::vector<bool>> Settler::DeleteShared(
    const std::vector<store::TakeItem>& takes, absl::Status* elsewhere) {
  // Led by this worker, the statement runs on its own connection.
  const SharedCommit::Result shared = config_.shared_commit->Ack(
      takes, [this](const std::vector<store::TakeItem>& all) {
        return acks_.DeleteOfTakes(config_.group, all);
      });
  if (shared.status.ok()) return shared.each;
  if (shared.led ||
      !(absl::IsUnavailable(shared.status) || absl::IsUnknown(shared.status))) {
    return shared.status;
  }
  // Another worker's connection broke under the shared statement, so
  // whether it deleted these items is unknown; this worker's connection is
  // fine: the fenced delete again, alone.
  *elsewhere = shared.status;
  return acks_.DeleteOfTakes(config_.group, takes);
}

void Settler::EndEmptyCalls() {
  const absl::Status ended = acks_.CommitCalls();
  // A transaction that would not end (one that failed) must not stay open
  // under the worker's next statement: it goes with the connection.
  if (!ended.ok()) connection_.Disconnect(ended);
}

std::vector<Settler::Gathered> Settler::CommitGathered() {
  std::vector<Gathered> out;
  out.swap(resolved_);
  for (Gathered& g : CommitGatheredNow()) out.push_back(std::move(g));
  return out;
}

std::vector<Settler::Gathered> Settler::CommitGatheredNow() {
  std::vector<GatheredAcks::Ack> acks = gathered_.Take();
  std::vector<Gathered> out;
  out.reserve(acks.size());
  const auto all = [&](Outcome o) {
    for (GatheredAcks::Ack& ack : acks) {
      out.push_back({std::move(ack.item.id), o});
    }
    return std::move(out);
  };
  if (acks.empty()) {
    // A transaction of grouped calls none of which deleted its item.
    if (acks_.CallsOpen() && connection_.Connected()) EndEmptyCalls();
    acks_.ForgetCalls();
    return out;
  }
  if (!connection_.Connected()) {
    // Dropped with the connection: the items are read again.
    acks_.ForgetCalls();
    log_->warn(
        "worker={} the acks of {} handled item(s) went with the connection: "
        "they will be handled again",
        index_, acks.size());
    return all(Outcome::kBroken);
  }
  std::vector<store::TakeItem> takes;
  takes.reserve(acks.size());
  for (const GatheredAcks::Ack& ack : acks) {
    takes.push_back(
        {ack.item.id, ack.ref.session, ack.ref.part, ack.ref.epoch});
  }
  const absl::Time start = absl::Now();
  absl::Status elsewhere;
  absl::StatusOr<std::vector<bool>> each;
  if (config_.kind.in_function()) {
    // Grouped calls: each deleted its item (those that did not were
    // settled as lost then); they all commit, or none. A transaction no
    // longer open went with its connection.
    const absl::Status committed =
        acks_.CallsOpen() ? acks_.CommitCalls()
                          : absl::CancelledError("grouped calls lost");
    if (committed.ok()) {
      each = std::vector<bool>(acks.size(), true);
    } else {
      each = committed;
    }
  } else {
    each = config_.shared_commit ? DeleteShared(takes, &elsewhere)
                                 : acks_.DeleteOfTakes(config_.group, takes);
  }
  if (!each.ok()) {
    const absl::Status& error = each.status();
    if (absl::IsCancelled(error)) {
      // Grouped calls on a connection dropped since: lost with it.
      log_->warn(
          "worker={} the calls of {} item(s) went with the connection: they "
          "will be handled again",
          index_, acks.size());
      return all(Outcome::kBroken);
    }
    if (absl::IsUnavailable(error)) {
      connection_.Disconnect(error);
      return all(Outcome::kBroken);
    }
    if (absl::IsUnknown(error)) {
      log_->error("worker={} acknowledging {} item(s): {}", index_, acks.size(),
                  std::string(error.message()));
      connection_.Disconnect(absl::UnknownError("commit in doubt"));
      return all(Outcome::kBroken);
    }
    if (absl::IsAborted(error)) {
      // A conflict wrote nothing: each item goes back as after a conflict
      // of its own ack (a backoff, no attempt counted, unless it keeps
      // conflicting).
      for (GatheredAcks::Ack& ack : acks) {
        const Outcome o =
            Conflict(ack.ref, {ack.item}, std::string(error.message()));
        out.push_back({std::move(ack.item.id), o});
      }
      return out;
    }
    // Nothing was written (a missing grant, a broken schema, a deferred
    // constraint of grouped calls): they are read again after a rest of
    // their parts, and handed out again, as after an ack of their own that
    // failed. Calls commit alone for a while, so that a call at fault
    // gets its own verdict.
    if (config_.kind.in_function()) {
      grouping_refused_until_ = absl::Now() + absl::Minutes(1);
    }
    log_->error(
        "worker={} acknowledging {} handled item(s) failed, so they will be "
        "handled again: {}",
        index_, acks.size(), std::string(error.message()));
    return all(Outcome::kBroken);
  }
  int64_t acked = 0;
  for (size_t i = 0; i < acks.size(); ++i) {
    const bool deleted = i < each->size() && (*each)[i];
    acked += deleted;
    // Not deleted again alone after the shared statement broke elsewhere:
    // it may have committed there; read again if still waiting.
    const Outcome o = deleted          ? Outcome::kAcked
                      : elsewhere.ok() ? Outcome::kLost
                                       : Outcome::kBroken;
    out.push_back({std::move(acks[i].item.id), o});
  }
  if (acked > 0) metrics_.Acked(acked, absl::Now() - start);
  const int64_t lost = static_cast<int64_t>(acks.size()) - acked;
  if (lost > 0 && elsewhere.ok()) {
    metrics_.LostClaims(lost);
    log_->warn("worker={} lost claim on {} item(s): not acknowledged", index_,
               lost);
  } else if (lost > 0) {
    log_->warn(
        "worker={} a shared ack of {} item(s) broke on another worker's "
        "connection ({}); reading them again",
        index_, lost, std::string(elsewhere.message()));
  }
  return out;
}

Settler::Attempt Settler::CallInAck(const store::ClaimRef& ref,
                                    const std::vector<Item>& items,
                                    const std::vector<std::string>& ids,
                                    NextClaim* next, bool gather) {
  // One autocommit statement: the fenced delete calls the function on the
  // items it deletes. Whatever it deleted is acknowledged, and handled.
  Attempt a;
  a.alone = true;
  a.ack_start = absl::Now();
  if (gather && config_.sql_calls_per_commit > 1 && acks_.CanGroupCalls()) {
    if (!acks_.CallsOpen() && !gathered_.empty()) {
      // Calls gathered, and no transaction open for them: it broke with
      // its connection (this call would begin a new one, on the next).
      SettleGatheredAside();
    }
    absl::StatusOr<bool> called = acks_.CallGrouped(ref, ids.front());
    if (absl::IsCancelled(called.status())) {
      // The transaction of the calls before went with a connection since
      // dropped: they are settled as lost, and this call begins anew.
      SettleGatheredAside();
      called = acks_.CallGrouped(ref, ids.front());
    }
    if (!called.ok()) {
      Failed(a, called.status(), ref, items);
    } else if (!*called) {
      a.deleted = 0;  // the take is gone: the function was not called
      // A transaction with nothing to keep ends now, before the worker's
      // next statement of another kind would run in it.
      if (gathered_.empty()) EndEmptyCalls();
    } else {
      const absl::Time now = absl::Now();
      gathered_.Add(ref, items.front(), now - a.ack_start, now);
      a.gathered = true;
    }
    return a;
  }
  const bool of_key = next && next->ask.of_key;
  const store::CarriedClaim carry =
      of_key ? next->Carried(config_.claim_batch) : store::CarriedClaim{};
  // A function of single items gets one at a time (config_.kind.batched).
  absl::StatusOr<store::AckedAndClaimed> r =
      Acks().AckInFunction(ref, ids, of_key ? &carry : nullptr);
  if (!r.ok()) {
    // Committed or not after a broken connection: the items are read again
    // if they are still there.
    Failed(a, r.status(), ref, items);
    return a;
  }
  a.deleted = r->acked;
  if (of_key) next->Take(std::move(*r), absl::Now() - a.ack_start);
  return a;
}

void Settler::Failed(Attempt& a, const absl::Status& error,
                     const store::ClaimRef& ref,
                     const std::vector<Item>& items) {
  if (absl::IsUnavailable(error)) {
    connection_.Disconnect(error);
    a.ended = Outcome::kBroken;
  } else if (absl::IsUnknown(error)) {
    // The commit may or may not have happened; the item is read again if
    // it is still there, and an ack that did commit deleted it for good.
    log_->error("part={} epoch={} {}", ref.part, ref.epoch,
                std::string(error.message()));
    connection_.Disconnect(absl::UnknownError("commit in doubt"));
    a.ended = Outcome::kBroken;
  } else if (absl::IsAborted(error)) {
    a.ended = Conflict(ref, items, std::string(error.message()));
  } else if (config_.kind.in_function()) {
    a.verdict = FunctionVerdict(error);  // the statement is the handler
  } else {
    a.verdict = error;
  }
}

absl::Status Settler::FunctionVerdict(const absl::Status& verdict) const {
  if (!absl::IsDeadlineExceeded(verdict)) return verdict;
  const std::string limit =
      config_.transaction_pooler
          ? "the member role's statement_timeout (docs/POOLERS.md)"
          : absl::StrCat("half the group's TTL (",
                         absl::FormatDuration(connection_.FunctionTimeout()),
                         ")");
  return absl::DeadlineExceededError(absl::StrCat(
      verdict.message(), ": it ran past the statement timeout, ", limit,
      ", the longest a function may hold its part's take, or someone "
      "canceled it. Make it faster, or raise the group's TTL"));
}

Settler::Outcome Settler::HandleSingly(const store::ClaimRef& ref,
                                       const std::vector<Item>& items) {
  // Under per-key order a batch holds runs of a key's items: once one is
  // put back for a retry, the rest of its key stay unhandled behind it (in
  // the table, due, but no longer heads). So once one died: a group that
  // holds its keys behind their dead letters (on_dead hold, a pause the
  // next claim reads) must not hand out the rest it already has, and under
  // release they are read again.
  std::set<uint64_t> waiting;
  // The batch went to the handler a while ago: each item goes again only
  // if still due (paused or cancelled since: left in the table, or gone),
  // read again as a claim that waited is (ProcessItems).
  std::set<std::string> due;
  absl::Time read_at = absl::InfinitePast();
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& item = items[i];
    if (scheduler_.ShouldYield(ref.part, ref.epoch)) {
      return Outcome::kRetryLater;
    }
    const uint64_t block = BlockOf(item);
    if (waiting.count(block)) continue;
    if (absl::Now() - read_at > kClaimFreshFor) {
      read_at = absl::Now();
      auto read = StillDueIds(ref, items, i);
      if (!read.ok()) return Outcome::kBroken;
      due = std::move(*read);
    }
    if (due.count(item.id) == 0) {
      // Paused or cancelled since: under per-key order, what follows in
      // its block waits behind it, as behind a retry.
      if (KeyOrder()) waiting.insert(block);
      continue;
    }
    const Outcome o = HandleBatch(ref, {item});
    if (!Settled(o)) return o;
    if ((o == Outcome::kReleased || o == Outcome::kFailed) && KeyOrder() &&
        item.key) {
      waiting.insert(block);
    }
  }
  return Outcome::kFailed;
}

Settler::Outcome Settler::Conflict(const store::ClaimRef& ref,
                                   const std::vector<Item>& items,
                                   const std::string& error) {
  // Runs after the acknowledging transaction has rolled back. The items go
  // back with a backoff that grows with the conflicts in a row (up to 8x
  // the smaller of backoff_initial and 200 ms), and no attempt is counted: the
  // items did nothing wrong, unless it keeps happening (see
  // kConflictsPerAttempt).
  metrics_.Conflicted(static_cast<int64_t>(items.size()));
  if (items.size() > 1) {
    // A batch is tallied as a whole (by its first item); once it has
    // conflicted too often, each item is tried on its own, so only an item
    // that conflicts by itself is ever counted as failing.
    const int n = config_.conflicts->Add("batch:" + items.front().id);
    if (n >= kConflictsPerAttempt) {
      config_.conflicts->Forget({"batch:" + items.front().id});
      log_->info(
          "part={} epoch={} batch of {} conflicted {} times in a row; "
          "trying its items singly: {}",
          ref.part, ref.epoch, items.size(), n, error);
      return HandleSingly(ref, items);
    }
    return ReleaseAfterConflict(ref, items, n, error);
  }
  const Item& item = items.front();
  const int n = config_.conflicts->Add(item.id);
  if (n >= kConflictsPerAttempt) {
    return Fail(ref, item,
                absl::StrCat("conflicted ", n,
                             " times in a row, counted as a failure: ", error));
  }
  return ReleaseAfterConflict(ref, items, n, error);
}

Settler::Outcome Settler::ReleaseAfterConflict(const store::ClaimRef& ref,
                                               const std::vector<Item>& items,
                                               int in_a_row,
                                               const std::string& error) {
  log_->info(
      "part={} epoch={} transient conflict on {} item(s) ({} in a row), "
      "retrying after a backoff: {}",
      ref.part, ref.epoch, items.size(), in_a_row, error);
  std::vector<std::string> ids;
  for (const Item& item : items) ids.push_back(item.id);
  // A conflict is over in milliseconds, not an outage: its backoff starts
  // at kConflictBackoff even when the failures' backoff_initial is longer.
  const absl::Duration delay = Backoff(
      std::min(in_a_row, 4),
      std::min(config_.backoff_initial, kConflictBackoff), config_.backoff_max);
  auto released = Acks().ReleaseForRetry(ref, ids, error, delay,
                                         /*count_attempt=*/false);
  if (!released.ok()) {
    if (absl::IsUnavailable(released.status())) {
      connection_.Disconnect(released.status());
    }
    return Outcome::kBroken;  // read again from the cursor
  }
  // The database set not_before before this clock read: never early.
  scheduler_.ExpectAt(absl::Now() + delay);
  return Outcome::kReleased;
}

Settler::Outcome Settler::Fail(const store::ClaimRef& ref, const Item& item,
                               const std::string& error, bool dead_now,
                               absl::Duration asked) {
  metrics_.Failed();
  config_.conflicts->Forget({item.id});  // "in a row" starts over
  const bool dead = dead_now || item.attempt >= config_.max_attempts;
  const absl::Duration delay = NextTryDelay(
      Backoff(item.attempt, config_.backoff_initial, config_.backoff_max),
      asked, config_.backoff_max);
  absl::StatusOr<bool> done;
  if (dead) {
    done = Acks().DeadLetter(ref, item.id, error, /*count_attempt=*/true);
  } else {
    auto released = Acks().ReleaseForRetry(ref, {item.id}, error, delay,
                                           /*count_attempt=*/true);
    if (released.ok()) {
      done = *released == 1;
    } else {
      done = released.status();
    }
  }
  if (!done.ok()) {
    if (absl::IsUnavailable(done.status())) {
      connection_.Disconnect(done.status());
      return Outcome::kBroken;
    }
    log_->warn("part={} epoch={} item={} could not be released: {}", ref.part,
               ref.epoch, item.id, std::string(done.status().message()));
    return Outcome::kBroken;  // read again from the cursor
  }
  if (!*done) return Outcome::kLost;
  if (dead) {
    metrics_.DeadLettered();
    log_->warn("part={} epoch={} item={} dead-lettered {} {} attempt(s): {}",
               ref.part, ref.epoch, item.id,
               dead_now ? "by its handler after" : "after", item.attempt,
               error);
  } else {
    metrics_.Retried();
    scheduler_.ExpectAt(absl::Now() + delay);
    // At info, but at most one line per part every few seconds: an outage
    // of a dependency fails every item of every part for as long as it
    // lasts.
    int64_t held_back = 0;
    if (log_->should_log(spdlog::level::info) &&
        config_.failure_log->Admit(ref.part, absl::Now(), &held_back)) {
      log_->info(
          "part={} epoch={} item={} key={} attempt {} of {} failed: {}; next "
          "try in {}{}{}",
          ref.part, ref.epoch, item.id, item.key ? *item.key : "(none)",
          item.attempt, config_.max_attempts, error,
          absl::FormatDuration(absl::Trunc(delay, absl::Milliseconds(1))),
          asked > absl::ZeroDuration() ? " (the handler asked to wait)" : "",
          held_back > 0
              ? absl::StrCat(" (", held_back,
                             " more failed attempts in this part not logged)")
              : "");
    } else {
      log_->debug("part={} epoch={} item={} attempt {} of {} failed: {}",
                  ref.part, ref.epoch, item.id, item.attempt,
                  config_.max_attempts, error);
    }
    return Outcome::kReleased;
  }
  return Outcome::kFailed;
}

}  // namespace sqlgroup
