#include "member/part_worker.h"

#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "key_placement.h"
#include "member/backoff.h"
#include "member/gathered_acks.h"
#include "schema_skew.h"
#include "spdlog/spdlog.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/function_ack.h"
#include "store/group_facts.h"
#include "store/member_store.h"

namespace sqlgroup {
namespace {

// For trace lines; 0 for a time that never was.
int64_t UnixMicros(absl::Time t) {
  return t == absl::InfinitePast() ? 0 : absl::ToUnixMicros(t);
}

// Where the sweep goes on after `items`: past the last of them, or, under
// per-key order, past its key's block (the key's next item waits for the
// next pass, so one busy key does not take every claim), wrapping at the
// end of the range.
Uuid128 After(const std::vector<Item>& items, const KeyRange& range,
              bool key_order) {
  Uuid128 last = PositionOf(items.back());
  if (key_order) last = BlockLast(BlockOf(last));
  return last >= range.last ? range.first : last + 1;
}

// A batch handler under per-key order stays with a key whose run filled
// its claim for up to kKeyTurn claims in a row, each reading on right after
// the items the last one settled; then the sweep moves past the key, so a
// key with a long backlog does not hold up the other keys of its part for
// long. Staying spares each claim a read from the key's first id over the
// index entries of the items just acknowledged (dead until vacuum).
constexpr int kKeyTurn = 4;

// Where the batch sweep goes on after `batch`, all settled: the next
// claim's cursor and turn (PartTask::turn).
struct Resume {
  Uuid128 cursor;
  int turn = 0;
};
// `batch` was claimed from `cursor` on its `turn`.
Resume AfterRun(const std::vector<Item>& batch, const Resume& from,
                const KeyRange& range, int claim_batch) {
  const Uuid128 last = PositionOf(batch.back());
  const uint64_t key = BlockOf(last);
  const int turn =
      from.turn > 0 && BlockOf(from.cursor) == key ? from.turn + 1 : 1;
  if (static_cast<int>(batch.size()) < claim_batch || turn >= kKeyTurn ||
      last >= range.last) {
    return {After(batch, range, true), 0};
  }
  // An unkeyed item is no key to stay with: the sweep goes on right after
  // it (unkeyed items may share its block) but on no turn, so the next
  // claim still looks behind its cursor for older items of a key whose
  // block that is (a key and an unkeyed id may meet in one block).
  if (!batch.back().key.has_value()) return {last + 1, 0};
  return {last + 1, turn};
}

// Items of one key a handler of single items takes in a row under per-key
// order (PartWorker::RunItem).
constexpr int kItemTurn = 16;

// Blocks walked per claim at most, under per-key order: bounds a claim's
// cost when many keys wait in backoff.
int MaxBlocks(int claim_batch) { return std::max(256, 4 * claim_batch); }
// Keys a probe walks per idle part at most before it calls the part due.
constexpr int kProbeBlocks = 64;

}  // namespace

PartWorker::PartWorker(int index, WorkerConfig config, PartScheduler& scheduler,
                       MemberMetrics& metrics,
                       std::shared_ptr<spdlog::logger> logger)
    : index_(index),
      config_(std::move(config)),
      scheduler_(scheduler),
      metrics_(metrics),
      log_(std::move(logger)),
      connection_(index_, config_.connection, config_.settle.kind, metrics_,
                  log_),
      settler_(index_, config_.settle, connection_.acks(), connection_,
               scheduler_, metrics_, log_) {}

void PartWorker::Run() {
  while (true) {
    // A worker whose task went back for want of a slot waits for one
    // before it takes another, instead of taking tasks it cannot run.
    if (connection_.starved()) {
      connection_.WaitForSlot(kStarvedWait);
      CommitGathered();  // on the slot, if it came
      last_work_ = absl::Now();
    }
    // A connection of its own is closed after a while without work (claims
    // and items; probes and lag reads only look): an idle member holds
    // only its control connection. A slot held is looked at every
    // kContendedCheck, and goes once the worker is idle when another
    // worker of the process waits for it, or when no connection was
    // opened on it.
    // After a task on the control connection for want of one of its own
    // (open_after_), tasks that wait already go first (the items a claim
    // just offered), still on the control connection; the worker opens its
    // own connection once none waits.
    // With acks gathered, the worker only looks for an item at hand: none
    // (another task, an item it may not gather past, or the gathering is
    // due), and they commit first.
    const bool gathering = settler_.gathered() > 0;
    const absl::Time idle_at = last_work_ + config_.idle_connection_timeout;
    PartTask task = scheduler_.Next(
        connection_.opens_after() || gathering ? absl::Now()
        : connection_.holds() ? std::min(idle_at, absl::Now() + kContendedCheck)
                              : absl::InfiniteFuture());
    if (gathering && !GatherPast(task)) {
      CommitGathered();
      if (task.kind == PartTask::Kind::kIdle) continue;
    }
    switch (task.kind) {
      case PartTask::Kind::kStop:
        connection_.CloseOwn();
        return;
      case PartTask::Kind::kIdle:
        if (connection_.opens_after()) {
          connection_.OpenAfterWarmTasks();
          continue;
        }
        if (!connection_.own() || absl::Now() >= idle_at ||
            config_.connection.budget->contended()) {
          connection_.CloseOwn();
        }
        continue;
      case PartTask::Kind::kClaim:
        RunClaim(task);
        break;
      case PartTask::Kind::kItem:
        RunItem(task);
        break;
      case PartTask::Kind::kProbe:
        RunProbe(task);
        break;
      case PartTask::Kind::kMeasureLag:
        RunMeasureLag(task);
        break;
    }
    connection_.AfterTask();
    if (task.kind == PartTask::Kind::kClaim ||
        task.kind == PartTask::Kind::kItem) {
      last_work_ = absl::Now();
      // Another worker of the process (maybe of another member) waits for
      // a slot: one held for a while goes, so that slots take turns.
      if (connection_.own() &&
          last_work_ - connection_.own_since() >= kShareAfter &&
          config_.connection.budget->contended()) {
        CommitGathered();
        connection_.CloseOwn();
      }
    }
  }
}

bool PartWorker::GatherPast(const PartTask& task) const {
  if (task.kind != PartTask::Kind::kItem || task.item.key.has_value() ||
      !KeyOrder() || settler_.GatheredDue(absl::Now())) {
    return false;
  }
  // A part on its way to another member waits for no other item's call.
  // By id, the items of one part are neighbours: each take is asked once.
  std::pair<int, int64_t> asked{-1, 0};
  for (const auto& [id, gathered] : gathered_tasks_) {
    const std::pair<int, int64_t> take{gathered.part, gathered.epoch};
    if (take == asked) continue;
    if (scheduler_.ShouldYield(take.first, take.second)) return false;
    asked = take;
  }
  return true;
}

void PartWorker::CommitGathered() {
  if (settler_.gathered() == 0) return;
  // On the connection at hand, its statements ready for the schema now;
  // after it broke, on a new one (or the control connection borrowed).
  // With none to be had, they are dropped and their items read again.
  // (Not when grouped calls are open on it: it was acquired for them, and
  // a statement Acquire may run would run in their transaction.)
  if (!(settler_.CallsOpen() && connection_.Connected())) {
    connection_.Acquire(/*own_wanted=*/true);
  }
  // By take and outcome: a part whose acks broke rests once for it, not
  // once per item.
  std::map<std::tuple<int, int64_t, bool>, std::vector<Item>> finished;
  for (const Settler::Gathered& g : settler_.CommitGathered()) {
    auto it = gathered_tasks_.find(g.id);
    if (it == gathered_tasks_.end()) continue;
    const bool again = g.outcome != Settler::Outcome::kBroken;
    finished[{it->second.part, it->second.epoch, again}].push_back(
        std::move(it->second.item));
    gathered_tasks_.erase(it);
  }
  // Those settled first: a part's rest comes last.
  for (auto it = finished.rbegin(); it != finished.rend(); ++it) {
    const auto& [part, epoch, again] = it->first;
    scheduler_.FinishItems(part, epoch, it->second, again);
  }
  connection_.GiveBack();
}

void PartWorker::RunProbe(const PartTask& task) {
  if (!connection_.Acquire(/*own_wanted=*/false)) {
    scheduler_.AbandonProbe();
    return;
  }
  auto probe =
      KeyOrder()
          ? store::ProbeHeads(*connection_.get(), config_.settle.group,
                              task.probe_parts, task.probe_ranges, kProbeBlocks)
          : store::ProbeParts(*connection_.get(), config_.settle.group,
                              task.probe_parts, task.probe_ranges);
  if (!probe.ok()) {
    if (absl::IsUnavailable(probe.status()))
      connection_.Disconnect(probe.status());
    scheduler_.AbandonProbe();
    return;
  }
  // The control connection runs the first claim after a quiet spell:
  // warmed while nothing waits (a probe of newly taken parts finds them
  // idle).
  if (probe->due.empty()) connection_.WarmBorrowed();
  if (probe->soonest != absl::InfiniteDuration()) {
    // Measured before this clock read: never early.
    scheduler_.ExpectAt(absl::Now() + probe->soonest);
  }
  scheduler_.FinishProbe(probe->due, task.heard);
}

// Dead letters removed past the retention per lag measurement, at most.
constexpr int kExpireBatch = 5000;

void PartWorker::RunMeasureLag(const PartTask& task) {
  // The group's facts are read to be published and its dead letters
  // expired on schema 18 on: a member without either needs no connection.
  const bool group = task.group_facts &&
                     (metrics_.publishes() ||
                      connection_.SchemaNow() >= internal::kDeadRetentionFrom);
  if ((task.probe_parts.empty() && !group) ||
      !connection_.Acquire(/*own_wanted=*/false)) {
    scheduler_.FinishLag();
    return;
  }
  if (!task.probe_parts.empty()) MeasureParts(task);
  if (group && connection_.get()) MeasureGroup();
  scheduler_.FinishLag();
}

void PartWorker::MeasureParts(const PartTask& task) {
  // Exact up to this many keys per part, estimated above: at most about
  // 100,000 index entries per measurement, whatever P and the backlog.
  const int cap = std::clamp(
      100000 / std::max<int>(1, static_cast<int>(task.probe_parts.size())), 100,
      1000);
  auto lag = store::MeasureLag(*connection_.get(), config_.settle.group,
                               task.probe_parts, task.probe_ranges, cap);
  if (!lag.ok()) {
    log_->warn("group={} measuring lag failed: {}", config_.settle.group,
               std::string(lag.status().message()));
    if (absl::IsUnavailable(lag.status())) connection_.Disconnect(lag.status());
  } else {
    for (const store::PartLagRow& row : *lag) {
      metrics_.PartLag(row.part, row.items, row.oldest);
    }
  }
  // Keys blocked behind a retry, per part. Under ordering 'none' a failed
  // item holds back nothing: every part reports 0, so that the series
  // exist whatever the ordering.
  if (!KeyOrder()) {
    for (int part : task.probe_parts) {
      metrics_.PartBlocked(part, 0, absl::ZeroDuration());
    }
  } else if (connection_.get()) {  // else the lag's read broke the connection
    auto blocked =
        store::MeasureBlocked(*connection_.get(), config_.settle.group,
                              task.probe_parts, task.probe_ranges, cap);
    if (!blocked.ok()) {
      log_->warn("group={} counting blocked keys failed: {}",
                 config_.settle.group, std::string(blocked.status().message()));
      if (absl::IsUnavailable(blocked.status()))
        connection_.Disconnect(blocked.status());
    } else {
      for (const store::PartBlockedRow& row : *blocked) {
        metrics_.PartBlocked(row.part, row.keys, row.oldest);
      }
    }
  }
}

void PartWorker::MeasureGroup() {
  const std::string& group = config_.settle.group;
  const int schema = connection_.SchemaNow();
  auto fail = [&](const char* what, const absl::Status& why) {
    log_->warn("group={} {} failed: {}", group, what,
               std::string(why.message()));
    if (absl::IsUnavailable(why)) connection_.Disconnect(why);
  };
  if (schema >= internal::kDeadRetentionFrom) {
    // A bounded batch per measurement: a backlog of expired dead letters
    // goes over several rounds instead of in one long transaction.
    auto expired =
        store::ExpireDeadItems(*connection_.get(), group, kExpireBatch);
    if (!expired.ok()) {
      fail("removing dead letters past the retention", expired.status());
    } else if (*expired > 0) {
      metrics_.DeadExpired(*expired);
      log_->info(
          "group={} removed {} dead letter(s) past the group's "
          "dead_retention",
          group, *expired);
    } else if (*expired < 0 && !told_no_expire_) {
      told_no_expire_ = true;
      log_->warn(
          "group={} this member's role may not call "
          "sqlgroup.dead_expire, so it leaves dead letters past the "
          "group's dead_retention; `sqlgroup grant --member_role "
          "ROLE` grants it",
          group);
    }
  }
  // Read only to be published, and not on a connection that just broke.
  if (!metrics_.publishes() || !connection_.get()) return;
  auto facts = store::ReadGroupFacts(*connection_.get(), group, schema);
  if (!facts.ok()) {
    fail("reading the group's dead letters and pauses", facts.status());
    return;
  }
  metrics_.GroupFacts(facts->dead_items, facts->oldest_dead, facts->paused,
                      facts->paused_keys);
  metrics_.GroupTopic(facts->topic, facts->topic_published);
}

void PartWorker::RunClaim(PartTask& task) {
  // Run (GatherPast) commits them before any claim already: a claim must
  // not read an item whose ack waits.
  CommitGathered();
  ClaimEnd end = Sweep(task);
  if (end.offered) return;  // Offer ended the task
  scheduler_.FinishClaim(task.ref.part, task.ref.epoch, end.found, end.cursor,
                         end.turn, std::move(end.claimed), end.claimed_at);
  if (end.rest > absl::ZeroDuration()) {
    scheduler_.ExpectAt(absl::Now() + end.rest);
  }
}

PartWorker::ClaimEnd PartWorker::Sweep(PartTask& task) {
  const store::ClaimRef& ref = task.ref;
  const int64_t epoch = ref.epoch;
  const absl::Time task_start = absl::Now();
  if (!connection_.Acquire(/*own_wanted=*/true)) {
    return {.found = true,
            .cursor = task.cursor,
            .turn = task.turn,
            .claimed = std::move(task.claimed),
            .claimed_at = task.claimed_at};
  }
  // Sweep from the cursor; at the end of the range, wrap once to its start
  // so every item is reached within one pass.
  const bool key_order = KeyOrder();
  Uuid128 from = task.cursor;
  const absl::Time claim_start = absl::Now();
  absl::StatusOr<std::vector<Item>> items;
  // Claimed already, by the last batch's ack (counted then: in the
  // metrics and, after a dead predecessor, in attempts).
  const bool preclaimed = !task.claimed.empty();
  absl::Time claimed_at = preclaimed ? task.claimed_at : claim_start;
  if (preclaimed) {
    items = std::move(task.claimed);
  } else if (key_order) {
    items = ClaimKeyHeads(task, &from);
  } else {
    items = store::ClaimItems(*connection_.get(), ref, from, task.range.last,
                              config_.settle.claim_batch);
    if (items.ok() && items->empty() && from != task.range.first) {
      from = task.range.first;
      items = store::ClaimItems(*connection_.get(), ref, from, task.range.last,
                                config_.settle.claim_batch);
    }
  }
  if (!items.ok()) {
    // ABORTED: the take is gone; the control thread will see the loss.
    // Anything else: reconnect and read again from the same place.
    log_->debug("part={} epoch={} claim failed: {}", ref.part, epoch,
                std::string(items.status().message()));
    if (absl::IsAborted(items.status()))
      return {.found = false, .cursor = from};
    connection_.Disconnect(items.status());
    connection_.SleepBackoff();
    return {.found = true, .cursor = from};
  }
  if (items->empty()) return {.found = false, .cursor = task.range.first};
  if (task.predecessor_died_at && !preclaimed &&
      (!settler_.CountDeliveriesOfTheDead(ref, *task.predecessor_died_at,
                                          task.dead_counted.get(), *items) ||
       items->empty())) {
    // Broken, or every item was dead-lettered: read again from the same
    // place (their keys' next items may be due).
    return {.found = true, .cursor = from};
  }
  if (!preclaimed && log_->should_log(spdlog::level::trace)) {
    // The stages of a wake-up, as unix microseconds (0: not announced):
    // bench/latency_bench.py joins them with the items' database clocks.
    std::vector<std::string> ids;
    for (const Item& item : *items) ids.push_back(item.id);
    log_->trace(
        "stages part={} worker={} heard={} task={} connected={} "
        "claimed={} ids={}",
        ref.part, index_, UnixMicros(task.heard), UnixMicros(task_start),
        UnixMicros(claim_start), UnixMicros(absl::Now()),
        absl::StrJoin(ids, ","));
  }
  if (key_order && !Batched()) {
    // One item at a time, on whichever workers are free: the keys of the
    // part run in parallel. Heads whose key is with a handler already are
    // not claims.
    const absl::Duration took = absl::Now() - claim_start;
    const Uuid128 next = After(*items, task.range, key_order);
    const size_t taken = scheduler_.Offer(ref.part, epoch, task.finished,
                                          std::move(*items), next, claim_start);
    if (taken > 0) metrics_.Claimed(static_cast<int64_t>(taken), took);
    return {.offered = true};
  }
  if (!preclaimed) {
    metrics_.Claimed(static_cast<int64_t>(items->size()),
                     absl::Now() - claim_start);
  }
  std::vector<Item> batch = std::move(*items);
  bool chained = false;  // `batch` came with the previous batch's ack
  // Where `batch` was read from, and on which turn of its key.
  Resume read_at{task.cursor, task.turn};
  Uuid128 next;
  while (true) {
    if (chained && (connection_.YieldControl() || !connection_.FollowTtl() ||
                    !scheduler_.KeepClaiming(ref.part, epoch))) {
      // Another part waits for a worker (or a probe, the lag, the control
      // thread for its connection; or the connection broke): the part goes
      // back with this batch, and its next turn starts on it. A claim
      // wrote nothing: should the part move meanwhile, the batch is only
      // dropped.
      return {.found = true,
              .cursor = read_at.cursor,
              .turn = read_at.turn,
              .claimed = std::move(batch),
              .claimed_at = claimed_at};
    }
    Settler::NextClaim more;
    const Uuid128 after = After(batch, task.range, key_order);
    // Under per-key order the sweep may stay with the last key, but only
    // after the whole batch was acknowledged: a batch that failed and was
    // tried singly can leave a key's item behind for a retry, and its
    // later items must wait behind it.
    const Resume run = key_order ? AfterRun(batch, read_at, task.range,
                                            config_.settle.claim_batch)
                                 : Resume{after};
    // A batch handler's ack carries the part's next claim (unless the sweep
    // wraps there): under per-key order, the read along the range that
    // ClaimRuns makes. Not when the part yields, nor on a borrowed control
    // connection that the control thread waits for: its heartbeats come
    // first. (A SQL function on arrays: its ack's statement carries no
    // claim.)
    const bool chain = config_.settle.batch_handler &&
                       !connection_.YieldControl() &&
                       !scheduler_.ShouldYield(ref.part, epoch) &&
                       run.cursor != task.range.first;
    if (chain) {
      more.ask.from = run.cursor;
      more.ask.last = task.range.last;
      if (key_order) {
        more.ask.runs = true;
        more.ask.continued = run.turn > 0;
        more.ask.pass_over = &task.busy_keys;
      }
    }
    const Settler::Progress p = settler_.ProcessItems(
        ref, batch, claimed_at, chain ? &more : nullptr, Gathers());
    // Items left unsettled (a yield, a broken connection) are still in the
    // table, due: the next claim starts at the first of them.
    next = p.settled == batch.size() ? after : PositionOf(batch[p.settled]);
    if (p.broken) break;
    broken_in_a_row_ = 0;
    if (!more.sent || p.settled < batch.size() || (key_order && !p.acked)) {
      const Resume resume = key_order && p.acked ? run : Resume{next};
      return {.found = true, .cursor = resume.cursor, .turn = resume.turn};
    }
    if (!more.items.ok()) {  // ABORTED: the take is gone
      return {.found = false, .cursor = next};
    }
    if (more.items->empty()) {
      // The end of the range: wrap next time. Under per-key order, the
      // keys it read may only wait: the next claim walks on from there.
      const Uuid128 at =
          !key_order || more.exhausted ? task.range.first : more.resume;
      return {.found = true, .cursor = at};
    }
    metrics_.Claimed(static_cast<int64_t>(more.items->size()), more.took,
                     /*carried=*/true);
    batch = std::move(*more.items);
    claimed_at = more.claimed_at;
    // A batch the ack read during the first pass after a dead predecessor
    // counts its deliveries there as a claim of its own does.
    if (task.predecessor_died_at &&
        (!settler_.CountDeliveriesOfTheDead(ref, *task.predecessor_died_at,
                                            task.dead_counted.get(), batch) ||
         batch.empty())) {
      return {.found = true, .cursor = run.cursor, .turn = run.turn};
    }
    read_at = run;
    chained = true;
  }
  // The same item would break the same way at once (a missing grant, an
  // error the database refuses to store): instead of spinning on it, the
  // part goes idle until the next probe of idle parts, or a growing
  // backoff when that comes sooner (a listening member probes rarely).
  return {.found = false,
          .cursor = next,
          .rest = Backoff(++broken_in_a_row_, absl::Milliseconds(100),
                          absl::Seconds(5))};
}

absl::StatusOr<std::vector<Item>> PartWorker::ClaimKeyHeads(
    const PartTask& task, Uuid128* from) {
  // A batch handler reads along the range as the sweep does and takes
  // the due prefix of each key it meets (the SQL side of ClaimRuns); a
  // handler of single items takes one item per key, from a walk over the
  // keys' heads.
  const Uuid128 start = *from;
  bool wrapped = start == task.range.first;
  while (true) {
    auto claim =
        Batched() ? store::ClaimRuns(*connection_.get(), task.ref, *from,
                                     task.range.last,
                                     config_.settle.claim_batch, task.busy_keys,
                                     task.turn > 0 && *from == task.cursor)
                  : store::ClaimHeads(
                        *connection_.get(), task.ref, *from, task.range.last,
                        config_.settle.claim_batch,
                        MaxBlocks(config_.settle.claim_batch), task.busy_keys);
    if (!claim.ok()) return claim.status();
    if (!claim->items.empty()) return std::move(claim->items);
    if (scheduler_.ShouldYield(task.ref.part, task.ref.epoch)) {
      return std::vector<Item>{};
    }
    // Every key walked so far waits: walk on, once round the range.
    if (claim->exhausted) {
      if (wrapped) return std::vector<Item>{};
      wrapped = true;
      *from = task.range.first;
    } else {
      if (wrapped && claim->resume >= start) return std::vector<Item>{};
      *from = claim->resume;
    }
  }
}

absl::StatusOr<bool> PartWorker::StillDueAfterWaiting(const PartTask& task) {
  if (absl::Now() - task.claimed_at <= kClaimFreshFor) return true;
  const absl::StatusOr<size_t> end =
      settler_.DueRunEnd(task.ref, {task.item}, 0);
  if (!end.ok()) return end.status();
  return *end == 1;
}

void PartWorker::RunItem(const PartTask& task) {
  const store::ClaimRef& ref = task.ref;
  bool again = true;
  // Grouped calls open on the connection keep it as acquired for the first
  // of them: a statement Acquire may run (a re-prepare after a schema
  // change, a new TTL's timeouts) would run in their transaction. It runs
  // after their commit, before the worker's next task of another kind.
  const bool acquired = (settler_.CallsOpen() && connection_.Connected()) ||
                        connection_.Acquire(/*own_wanted=*/true);
  if (!acquired) {
    // Read again after a probe; at once by another worker when this one
    // only had no slot of the budget.
    again = connection_.starved();
  } else if (const absl::StatusOr<bool> due = StillDueAfterWaiting(task);
             !due.ok()) {
    again = false;  // the connection broke: as a broken claim, a rest
  } else if (!*due) {
    // Paused, cancelled or settled since its claim: the key is free again,
    // and the part's next claim reads it afresh.
  } else {
    // The worker keeps the key for up to kItemTurn of its items, reading
    // the next one as soon as one is settled: a key that carries much of
    // the traffic moves at its handler's pace, not at one item per pass
    // over its part's keys. The key stays the worker's meanwhile, so no
    // other worker can take its next item.
    Item item = task.item;
    for (int n = 1; !scheduler_.ShouldYield(ref.part, ref.epoch); ++n) {
      // Unkeyed items have no order to keep: one per task.
      // On a borrowed control connection, one item when the control
      // thread waits for it.
      const bool go_on =
          n < kItemTurn && item.key.has_value() && !connection_.YieldControl();
      Settler::NextClaim more;
      more.ask.of_key = true;
      // As for a claim that broke, the part waits instead of spinning; the
      // scheduler keeps its backoff, since the next try may be another
      // worker's.
      // An unkeyed item may leave its ack with the gathered ones: the task
      // then ends once that ack committed.
      const Settler::Outcome o =
          settler_.HandleBatch(ref, {item}, go_on ? &more : nullptr,
                               !go_on && !item.key && KeyOrder() && Gathers());
      if (o == Settler::Outcome::kGathered) {
        gathered_tasks_[item.id] = {ref.part, ref.epoch,
                                    WithoutPayload(task.item)};
        return;
      }
      if (o == Settler::Outcome::kBroken) again = false;
      // Released for a retry (the key waits for it) or lost with the take.
      if (!go_on ||
          (o != Settler::Outcome::kAcked && o != Settler::Outcome::kFailed)) {
        break;
      }
      if (!more.sent) {  // dead-lettered: the next of its key is read now
        const absl::Time start = absl::Now();
        more.items = store::NextOfKey(*connection_.get(), ref, item.id);
        more.took = absl::Now() - start;
      }
      if (!more.items.ok()) {
        if (!absl::IsAborted(more.items.status())) {
          connection_.Disconnect(more.items.status());
        }
        break;
      }
      if (more.items->empty()) break;
      metrics_.Claimed(1, more.took, /*carried=*/more.sent);
      item = std::move(more.items->front());
    }
  }
  scheduler_.FinishItem(ref.part, ref.epoch, task.item, again);
}

}  // namespace sqlgroup
