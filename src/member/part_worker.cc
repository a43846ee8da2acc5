#include "member/part_worker.h"

#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "key_placement.h"
#include "member/backoff.h"
#include "spdlog/spdlog.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/function_ack.h"
#include "store/member_store.h"

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

// The handler's verdict; an exception is a failure with its message, except
// a broken connection or an error that says nothing of the item (a
// conflict), which the caller handles.
template <typename F>
absl::Status RunHandler(F&& f) {
  try {
    return f();
  } catch (const pqxx::broken_connection&) {
    throw;
  } catch (const pqxx::transaction_rollback&) {
    throw;
  } catch (const pqxx::sql_error& e) {
    if (store::SaysNothingOfTheItem(store::SqlStateOf(e))) throw;
    return absl::InternalError(absl::StrCat("handler threw: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("handler threw: ", e.what()));
  } catch (...) {
    return absl::InternalError("handler threw a non-standard exception");
  }
}

// Where the sweep goes on after `items`: past the last of them, or, under
// per-key order, past its key's block (the key's next item waits for the
// next pass, so one busy key does not take every claim), wrapping at the
// end of the range.
Uuid128 After(const std::vector<Item>& items, const KeyRange& range,
              bool key_order) {
  Uuid128 last = *ParseUuid(items.back().id);
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
  const Uuid128 last = *ParseUuid(batch.back().id);
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
      log_(std::move(logger)) {}

void PartWorker::Run() {
  while (true) {
    // A worker whose task went back for want of a slot waits for one
    // before it takes another, instead of taking tasks it cannot run.
    if (starved_) {
      starved_ = false;
      AcquireSlot(kStarvedWait);
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
    const absl::Time idle_at = last_work_ + config_.idle_connection_timeout;
    PartTask task = scheduler_.Next(
        open_after_     ? absl::Now()
        : own_ || slot_ ? std::min(idle_at, absl::Now() + kContendedCheck)
                        : absl::InfiniteFuture());
    switch (task.kind) {
      case PartTask::Kind::kStop:
        CloseOwn();
        return;
      case PartTask::Kind::kIdle:
        if (open_after_) {
          OpenAfterWarmTasks();
          continue;
        }
        if (!own_ || absl::Now() >= idle_at || config_.budget->contended()) {
          CloseOwn();
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
    GiveBack();
    if (open_after_) {
      // Not for a whole burst: the control thread has its own work.
      if (++warm_tasks_ >= kWarmTasks) OpenAfterWarmTasks();
    }
    if (task.kind == PartTask::Kind::kClaim ||
        task.kind == PartTask::Kind::kItem) {
      last_work_ = absl::Now();
      // Another worker of the process (maybe of another member) waits for
      // a slot: one held for a while goes, so that slots take turns.
      if (own_ && last_work_ - own_since_ >= kShareAfter &&
          config_.budget->contended()) {
        CloseOwn();
      }
    }
  }
}

bool PartWorker::EnsureConnected(bool own_wanted) {
  if (conn_ != nullptr) return true;
  if (own_) {
    conn_ = own_.get();
    return true;
  }
  // Reads that find work (probes, lag) do not open a connection: they
  // borrow the control connection when the worker has none.
  if (!own_wanted) return BorrowControl(kBorrowWait);
  const bool slots = config_.budget->worker_slots() > 0;
  // The first claim after a quiet spell: opening a connection (a backend
  // started, its caches cold) would cost the items more than the claim
  // and handler themselves. The control connection is warm: the task runs
  // there when it is free within about what a connect costs, and the
  // worker opens its own after it, off the items' path, with the slot it
  // takes first. The slot goes with the borrowed connection: should a
  // handler keep it past a heartbeat, the control thread leaves it to the
  // worker and goes on with a new one on that slot (MemberLoop::TakeBack).
  // Not again right after a handler kept it so long that it was abandoned.
  if (slots && !refused_ && !abandoned_ && AcquireSlot(absl::ZeroDuration()) &&
      BorrowControl(kWarmBorrowWait, /*with_slot=*/true)) {
    open_after_ = true;
    return true;
  }
  const Opened opened = slots ? OpenOwn() : Opened::kNoSlot;
  if (opened == Opened::kYes) return true;
  // Otherwise items run on the control connection only when there is no
  // other way: a budget without a slot for workers, or a server that
  // refuses connections. A handler there may hold up the member's
  // heartbeats (no slot to go on with), so a worker whose siblings hold
  // the budget's slots waits for one instead (its task goes back to the
  // others at once).
  if (refused_ || !slots) return BorrowControl(kBorrowWait);
  if (opened == Opened::kNoSlot) {
    starved_ = true;
  } else {
    // The server is out of reach (not full): nothing to borrow either,
    // most likely; the task goes back after a pause, not in a spin.
    const absl::Duration pause = std::clamp(next_own_try_ - absl::Now(),
                                            absl::ZeroDuration(), kBorrowWait);
    absl::SleepFor(pause);
  }
  return false;
}

bool PartWorker::AcquireSlot(absl::Duration wait) {
  if (!slot_) slot_ = config_.budget->TryAcquire(wait);
  return slot_;
}

void PartWorker::ReleaseSlot() {
  if (slot_) config_.budget->Release();
  slot_ = false;
}

PartWorker::Opened PartWorker::OpenOwn() {
  if (absl::Now() < next_own_try_) return Opened::kFailed;
  if (!AcquireSlot(absl::ZeroDuration())) return Opened::kNoSlot;
  const store::ConnectOptions options = WorkerOptions();
  auto conn = store::Connect(config_.dsn, options);
  if (!conn.ok()) {
    ReleaseSlot();
    ++connect_failures_;
    next_own_try_ =
        absl::Now() +
        Backoff(connect_failures_, absl::Milliseconds(200), absl::Seconds(5));
    if (store::ServerBusy(conn.status())) {
      metrics_.ConnectionRefused();
      // Once per episode, not per attempt: a full server is a condition.
      if (!refused_) {
        log_->warn(
            "worker={} the server takes no more connections; running on the "
            "control connection meanwhile and trying again with backoff: {}",
            index_, std::string(conn.status().message()));
      }
      refused_ = true;
    } else if (connect_failures_ == 1) {
      log_->warn("worker={} connect failed: {}", index_,
                 std::string(conn.status().message()));
    }
    return Opened::kFailed;
  }
  own_ = std::move(*conn);
  own_timeouts_ = store::ConnectionTimeouts(options);
  metrics_.ConnectionOpened("worker");
  absl::Status s = store::Guard("prepare", [&] { PrepareStatements(*own_); });
  if (!s.ok()) {
    CloseOwn();
    log_->warn("worker={} dropping connection: {}", index_,
               std::string(s.message()));
    return Opened::kFailed;
  }
  if (refused_ || connect_failures_ > 1) {
    log_->info("worker={} has a connection of its own again", index_);
  }
  refused_ = false;
  connect_failures_ = 0;
  conn_ = own_.get();
  timeouts_ = &own_timeouts_;
  own_since_ = absl::Now();
  open_after_ = false;
  warm_tasks_ = 0;
  abandoned_ = false;
  return Opened::kYes;
}

void PartWorker::PrepareStatements(pqxx::connection& conn) {
  store::PrepareItemStatements(conn);
  if (InFunction()) store::PrepareFunctionAcks(conn, config_.sql_function);
}

void PartWorker::OpenAfterWarmTasks() {
  open_after_ = false;
  warm_tasks_ = 0;
  // Ready for the next claim; without a slot now, it borrows again.
  if (!own_ && OpenOwn() == Opened::kYes) WarmUp();
}

void PartWorker::WarmUp() {
  // A backend's first statements of a kind fill its caches and make their
  // plans (generic ones: PrepareItemStatements): milliseconds, here
  // instead of on the next items' path. The claim and the acks its items
  // will take, under a take nobody holds (a nil session, epoch 0): planned
  // and run, they read and lock nothing, delete nothing and call no
  // function (the fence is an InitPlan, false before any item is read).
  const std::string nil = "00000000-0000-0000-0000-000000000000";
  store::ClaimRef ref;
  ref.group = config_.group;
  ref.session = nil;
  const Uuid128 at = 0;
  const absl::Status s = store::Guard("warm up", [&] {
    if (!KeyOrder()) {
      (void)store::ClaimItems(*conn_, ref, at, at, 1);
    } else if (Batched()) {
      (void)store::ClaimRuns(*conn_, ref, at, at, 1, {}, false);
    } else {
      (void)store::ClaimHeads(*conn_, ref, at, at, 1, 1, {});
    }
    if (config_.sql_function.arrays) {
      store::AckInFunctionOnArrays(*conn_, ref, {nil});
    } else if (Batched()) {
      store::DeleteClaimedNow(*conn_, ref, {nil, nil});
    } else if (InFunction()) {
      // Single items: an unkeyed one alone, a keyed one with the read of
      // its key's next.
      store::AckInFunction(*conn_, ref, nil);
      if (KeyOrder()) store::AckInFunctionAndNextOfKey(*conn_, ref, nil);
    } else {
      store::DeleteClaimedNow(*conn_, ref, {nil});
      if (KeyOrder()) store::AckAndNextOfKey(*conn_, ref, nil);
    }
  });
  if (absl::IsUnavailable(s)) Disconnect(s);
}

bool PartWorker::BorrowControl(absl::Duration wait, bool with_slot) {
  // The session stays valid until the connection is given back, even
  // should the control thread abandon the connection meanwhile.
  pqxx::connection* home =
      config_.lent->Borrow(wait, with_slot, &borrowed_session_);
  if (home == nullptr) return false;  // the control thread has it
  conn_ = home;
  borrowed_conn_ = home;  // conn_ is cleared if it breaks
  timeouts_ = &borrowed_session_->timeouts;
  metrics_.Borrowed();
  if (!borrowed_session_->item_statements) {
    absl::Status s =
        store::Guard("prepare", [&] { PrepareStatements(*conn_); });
    if (!s.ok()) {
      Disconnect(s);
      GiveBack();  // nothing ran on it
      return false;
    }
    borrowed_session_->item_statements = true;
  }
  return true;
}

void PartWorker::GiveBack() {
  if (borrowed()) {
    // NOTIFYs for the member that arrived with this task's results:
    // dispatched here (to the member's receivers), since the control
    // thread's poll of the socket cannot see them any more.
    int notified = 0;
    if (!borrowed_broken_) {
      const absl::Status s = store::Guard(
          "read notifications", [&] { notified = conn_->get_notifs(); });
      if (!s.ok()) borrowed_broken_ = true;
    }
    // Abandoned by the control thread (it went on with a new connection),
    // the connection closes here, and the slot lent with it is the control
    // thread's: the worker opens its own connection when it has a slot,
    // instead of borrowing the new one for its next tasks.
    if (config_.lent->Return(borrowed_conn_, borrowed_broken_, notified > 0)) {
      slot_ = false;
      open_after_ = false;
      warm_tasks_ = 0;
      abandoned_ = true;
    }
    borrowed_broken_ = false;
    borrowed_session_ = nullptr;
    borrowed_conn_ = nullptr;
    conn_ = nullptr;
    timeouts_ = nullptr;
  } else if (own_) {
    conn_ = own_.get();  // stays for the next task
  }
}

void PartWorker::CloseOwn() {
  if (own_) {
    if (conn_ == own_.get()) conn_ = nullptr;
    own_.reset();
    metrics_.ConnectionClosed("worker");
  }
  ReleaseSlot();
}

store::ConnectOptions PartWorker::WorkerOptions() const {
  store::ConnectOptions options;
  options.connect_timeout = config_.connect_timeout;
  options.application_name = absl::StrCat("sqlgroup-worker-", index_);
  // Half the TTL: a process paused inside an acknowledging transaction
  // holds its take's lock, which a static member's replacement (deleting
  // the old session) and any reaper wait for; ended at half the TTL, it is
  // gone no later than the paused session expires (a heartbeat interval is
  // at most half the TTL), so the replacement takes the place at once, not
  // the others after an expiry.
  options.idle_in_transaction_timeout =
      absl::Nanoseconds(config_.ttl_ns->load()) / 2;
  // A SQL function runs inside the fenced delete, after the fence took
  // the take's lock: bounded as a transaction's pause is, so that a slow
  // one (or one whose member was killed: the server runs on) cannot hold
  // up a drop or a reap for longer. No other code of the user's runs on
  // this connection then.
  if (InFunction()) {
    options.statement_timeout = options.idle_in_transaction_timeout;
  }
  options.transaction_pooler = config_.transaction_pooler;
  return options;
}

bool PartWorker::FollowTtl() {
  const absl::StatusOr<bool> set = timeouts_->Follow(*conn_, WorkerOptions());
  if (!set.ok()) {
    Disconnect(set.status());
    return false;
  }
  return true;
}

bool PartWorker::YieldControl() const {
  return borrowed() && config_.lent->Wanted();
}

void PartWorker::Disconnect(const absl::Status& why) {
  if (borrowed()) {
    // The control connection is the control thread's to drop: only when
    // it broke, not for a statement that failed on it.
    log_->warn("worker={} on the borrowed control connection: {}", index_,
               std::string(why.message()));
    if (absl::IsUnavailable(why) || absl::IsUnknown(why)) {
      borrowed_broken_ = true;  // the control thread reconnects
      conn_ = nullptr;
    }
    return;
  }
  log_->warn("worker={} dropping its connection: {}", index_,
             std::string(why.message()));
  CloseOwn();
}

void PartWorker::SleepBackoff() {
  std::this_thread::sleep_for(absl::ToChronoMilliseconds(
      Backoff(connect_failures_, absl::Milliseconds(50), absl::Seconds(2))));
}

void PartWorker::RunProbe(const PartTask& task) {
  if (!EnsureConnected(/*own_wanted=*/false) || !FollowTtl()) {
    scheduler_.AbandonProbe();
    return;
  }
  auto probe = KeyOrder()
                   ? store::ProbeHeads(*conn_, config_.group, task.probe_parts,
                                       task.probe_ranges, kProbeBlocks)
                   : store::ProbeParts(*conn_, config_.group, task.probe_parts,
                                       task.probe_ranges);
  if (!probe.ok()) {
    if (absl::IsUnavailable(probe.status())) Disconnect(probe.status());
    scheduler_.AbandonProbe();
    return;
  }
  if (borrowed() && probe->due.empty() && !borrowed_session_->warm) {
    // The control connection runs the first claim after a quiet spell:
    // warmed while nothing waits (a probe of newly taken parts finds them
    // idle).
    WarmUp();
    borrowed_session_->warm = true;
  }
  if (probe->soonest != absl::InfiniteDuration()) {
    // Measured before this clock read: never early.
    scheduler_.ExpectAt(absl::Now() + probe->soonest);
  }
  scheduler_.FinishProbe(probe->due, task.heard);
}

void PartWorker::RunMeasureLag(const PartTask& task) {
  if (!EnsureConnected(/*own_wanted=*/false) || !FollowTtl()) {
    scheduler_.FinishLag();
    return;
  }
  // Exact up to this many keys per part, estimated above: at most about
  // 100,000 index entries per measurement, whatever P and the backlog.
  const int cap = std::clamp(
      100000 / std::max<int>(1, static_cast<int>(task.probe_parts.size())), 100,
      1000);
  auto lag = store::MeasureLag(*conn_, config_.group, task.probe_parts,
                               task.probe_ranges, cap);
  if (!lag.ok()) {
    log_->warn("group={} measuring lag failed: {}", config_.group,
               std::string(lag.status().message()));
    if (absl::IsUnavailable(lag.status())) Disconnect(lag.status());
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
  } else if (conn_) {  // else the lag's read broke the connection
    auto blocked = store::MeasureBlocked(
        *conn_, config_.group, task.probe_parts, task.probe_ranges, cap);
    if (!blocked.ok()) {
      log_->warn("group={} counting blocked keys failed: {}", config_.group,
                 std::string(blocked.status().message()));
      if (absl::IsUnavailable(blocked.status())) Disconnect(blocked.status());
    } else {
      for (const store::PartBlockedRow& row : *blocked) {
        metrics_.PartBlocked(row.part, row.keys, row.oldest);
      }
    }
  }
  scheduler_.FinishLag();
}

void PartWorker::RunClaim(PartTask& task) {
  const store::ClaimRef& ref = task.ref;
  const int64_t epoch = ref.epoch;
  const absl::Time task_start = absl::Now();
  if (!EnsureConnected(/*own_wanted=*/true) || !FollowTtl()) {
    scheduler_.FinishClaim(ref.part, epoch, true, task.cursor, task.turn,
                           std::move(task.claimed));
    return;
  }
  // Sweep from the cursor; at the end of the range, wrap once to its start
  // so every item is reached within one pass.
  const bool key_order = KeyOrder();
  Uuid128 from = task.cursor;
  const absl::Time claim_start = absl::Now();
  absl::StatusOr<std::vector<Item>> items;
  // Claimed already, by the last batch's ack (counted then).
  const bool preclaimed = !task.claimed.empty();
  if (preclaimed) {
    items = std::move(task.claimed);
  } else if (key_order) {
    items = ClaimKeyHeads(task, &from);
  } else {
    items = store::ClaimItems(*conn_, ref, from, task.range.last,
                              config_.claim_batch);
    if (items.ok() && items->empty() && from != task.range.first) {
      from = task.range.first;
      items = store::ClaimItems(*conn_, ref, from, task.range.last,
                                config_.claim_batch);
    }
  }
  if (!items.ok()) {
    // ABORTED: the take is gone; the control thread will see the loss.
    // Anything else: reconnect and read again from the same place.
    log_->debug("part={} epoch={} claim failed: {}", ref.part, epoch,
                std::string(items.status().message()));
    if (absl::IsAborted(items.status())) {
      scheduler_.FinishClaim(ref.part, epoch, false, from);
    } else {
      Disconnect(items.status());
      SleepBackoff();
      scheduler_.FinishClaim(ref.part, epoch, true, from);
    }
    return;
  }
  if (items->empty()) {
    scheduler_.FinishClaim(ref.part, epoch, false, task.range.first);
    return;
  }
  if (task.predecessor_died_at && !preclaimed &&
      (!CountDeliveriesOfTheDead(task, *items) || items->empty())) {
    // Broken, or every item was dead-lettered: read again from the same
    // place (their keys' next items may be due).
    scheduler_.FinishClaim(ref.part, epoch, true, from);
    return;
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
                                          std::move(*items), next);
    if (taken > 0) metrics_.Claimed(static_cast<int64_t>(taken), took);
    return;
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
    if (chained && (YieldControl() || !FollowTtl() ||
                    !scheduler_.KeepClaiming(ref.part, epoch))) {
      // Another part waits for a worker (or a probe, the lag, the control
      // thread for its connection; or the connection broke): the part goes
      // back with this batch, and its next turn starts on it. A claim
      // wrote nothing: should the part move meanwhile, the batch is only
      // dropped.
      scheduler_.FinishClaim(ref.part, epoch, true, read_at.cursor,
                             read_at.turn, std::move(batch));
      return;
    }
    NextClaim more;
    const Uuid128 after = After(batch, task.range, key_order);
    // Under per-key order the sweep may stay with the last key, but only
    // after the whole batch was acknowledged: a batch that failed and was
    // tried singly can leave a key's item behind for a retry, and its
    // later items must wait behind it.
    const Resume run =
        key_order ? AfterRun(batch, read_at, task.range, config_.claim_batch)
                  : Resume{after};
    // A batch handler's ack carries the part's next claim (unless the sweep
    // wraps there): under per-key order, the read along the range that
    // ClaimRuns makes. Not when the part yields, nor on a borrowed control
    // connection that the control thread waits for: its heartbeats come
    // first. (A SQL function on arrays: its ack's statement carries no
    // claim.)
    const bool chain = config_.batch_handler && !YieldControl() &&
                       !scheduler_.ShouldYield(ref.part, epoch) &&
                       run.cursor != task.range.first;
    if (chain) {
      more.from = run.cursor;
      more.last = task.range.last;
      if (key_order) {
        more.runs = true;
        more.continued = run.turn > 0;
        more.pass_over = &task.busy_keys;
      }
    }
    const Progress p = ProcessItems(ref, batch, chain ? &more : nullptr);
    // Items left unsettled (a yield, a broken connection) are still in the
    // table, due: the next claim starts at the first of them.
    next = p.settled == batch.size() ? after : *ParseUuid(batch[p.settled].id);
    if (p.broken) break;
    broken_in_a_row_ = 0;
    if (!more.sent || p.settled < batch.size() || (key_order && !p.acked)) {
      const Resume resume = key_order && p.acked ? run : Resume{next};
      scheduler_.FinishClaim(ref.part, epoch, true, resume.cursor, resume.turn);
      return;
    }
    if (!more.items.ok()) {  // ABORTED: the take is gone
      scheduler_.FinishClaim(ref.part, epoch, false, next);
      return;
    }
    if (more.items->empty()) {
      // The end of the range: wrap next time. Under per-key order, the
      // keys it read may only wait: the next claim walks on from there.
      const Uuid128 at =
          !key_order || more.exhausted ? task.range.first : more.resume;
      scheduler_.FinishClaim(ref.part, epoch, true, at);
      return;
    }
    metrics_.Claimed(static_cast<int64_t>(more.items->size()), more.took,
                     /*carried=*/true);
    batch = std::move(*more.items);
    read_at = run;
    chained = true;
  }
  // The same item would break the same way at once (a missing grant, an
  // error the database refuses to store): instead of spinning on it, the
  // part goes idle until the next probe of idle parts, or a growing
  // backoff when that comes sooner (a listening member probes rarely).
  const absl::Duration delay =
      Backoff(++broken_in_a_row_, absl::Milliseconds(100), absl::Seconds(5));
  scheduler_.FinishClaim(ref.part, epoch, false, next);
  scheduler_.ExpectAt(absl::Now() + delay);
}

bool PartWorker::CountDeliveriesOfTheDead(const PartTask& task,
                                          std::vector<Item>& items) {
  const store::ClaimRef& ref = task.ref;
  std::vector<std::string> ids;
  ids.reserve(items.size());
  for (const Item& item : items) ids.push_back(item.id);
  auto counted = store::CountDeliveriesOfTheDead(*conn_, ref, ids,
                                                 *task.predecessor_died_at);
  if (!counted.ok()) {
    if (absl::IsUnavailable(counted.status())) {
      Disconnect(counted.status());
      return false;
    }
    // Nothing is lost by handing them out uncounted.
    log_->warn(
        "part={} epoch={} could not count the deliveries of its dead "
        "previous owner: {}",
        ref.part, ref.epoch, std::string(counted.status().message()));
    return true;
  }
  if (counted->empty()) return true;
  log_->info(
      "part={} epoch={} {} item(s) were due when the part's previous owner "
      "died: each counts an attempt (its delivery there may have been cut "
      "short)",
      ref.part, ref.epoch, counted->size());
  std::vector<Item> kept;
  kept.reserve(items.size());
  for (Item& item : items) {
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
    auto dead = store::DeadLetter(*conn_, ref, item.id, why,
                                  /*count_attempt=*/false);
    if (!dead.ok() && absl::IsUnavailable(dead.status())) {
      Disconnect(dead.status());
      return false;
    }
    if (dead.ok() && *dead) {
      metrics_.DeadLettered();
      log_->warn("part={} epoch={} item={} dead-lettered: {}", ref.part,
                 ref.epoch, item.id, why);
    }
  }
  items = std::move(kept);
  return true;
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
        Batched()
            ? store::ClaimRuns(*conn_, task.ref, *from, task.range.last,
                               config_.claim_batch, task.busy_keys,
                               task.turn > 0 && *from == task.cursor)
            : store::ClaimHeads(*conn_, task.ref, *from, task.range.last,
                                config_.claim_batch,
                                MaxBlocks(config_.claim_batch), task.busy_keys);
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

void PartWorker::RunItem(const PartTask& task) {
  const store::ClaimRef& ref = task.ref;
  bool again = true;
  if (!EnsureConnected(/*own_wanted=*/true) || !FollowTtl()) {
    // Read again after a probe; at once by another worker when this one
    // only had no slot of the budget.
    again = starved_;
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
          n < kItemTurn && item.key.has_value() && !YieldControl();
      NextClaim more;
      more.of_key = true;
      // As for a claim that broke, the part waits instead of spinning; the
      // scheduler keeps its backoff, since the next try may be another
      // worker's.
      const Outcome o = HandleBatch(ref, {item}, go_on ? &more : nullptr);
      if (o == Outcome::kBroken) again = false;
      // Released for a retry (the key waits for it) or lost with the take.
      if (!go_on || (o != Outcome::kAcked && o != Outcome::kFailed)) break;
      if (!more.sent) {  // dead-lettered: the next of its key is read now
        const absl::Time start = absl::Now();
        more.items = store::NextOfKey(*conn_, ref, item.id);
        more.took = absl::Now() - start;
      }
      if (!more.items.ok()) {
        if (!absl::IsAborted(more.items.status())) {
          Disconnect(more.items.status());
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

PartWorker::Progress PartWorker::ProcessItems(const store::ClaimRef& ref,
                                              const std::vector<Item>& items,
                                              NextClaim* next) {
  if (Batched()) {
    if (scheduler_.ShouldYield(ref.part, ref.epoch)) return {0, false};
    const Outcome o = HandleBatch(ref, items, next);
    if (Settled(o)) return {items.size(), false, o == Outcome::kAcked};
    return {0, o == Outcome::kBroken};
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (scheduler_.ShouldYield(ref.part, ref.epoch)) return {i, false};
    // Borrowed: the control thread's turn, after at least one item.
    if (i > 0 && YieldControl()) return {i, false};
    const Outcome o = HandleBatch(ref, {items[i]});
    if (o == Outcome::kBroken) return {i, true};
    if (o == Outcome::kRetryLater) return {i, false};
    if (o == Outcome::kLost) return {i + 1, false};  // the take is likely gone
  }
  return {items.size(), false};
}

PartWorker::Outcome PartWorker::HandleBatch(const store::ClaimRef& ref,
                                            const std::vector<Item>& items,
                                            NextClaim* next) {
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
  const Attempt a = InFunction() ? CallInAck(ref, items, ids, next)
                                 : RunAndAck(ref, items, ids, next);
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

void PartWorker::RecordOutcome(const store::ClaimRef& ref,
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
    const absl::Status s = store::ReportCircuit(
        *conn_, ref.session, change->to != CircuitBreaker::State::kClosed,
        change->error);
    if (!s.ok()) {
      log_->debug("group={} session={} circuit not recorded for describe: {}",
                  config_.group, ref.session, std::string(s.message()));
    }
  }
}

PartWorker::Attempt PartWorker::RunAndAck(const store::ClaimRef& ref,
                                          const std::vector<Item>& items,
                                          const std::vector<std::string>& ids,
                                          NextClaim* next) {
  Attempt a;
  try {
    AckTransaction ack(*conn_);
    a.verdict = RunHandler([&] {
      return config_.batch_handler ? config_.batch_handler(items, ack)
                                   : config_.handler(items.front(), ack);
    });
    if (a.verdict.ok()) {
      a.acking = true;
      a.ack_start = absl::Now();
      if (ack.started() && next && next->of_key) {
        // The key's next item is read by the ack's statement, in the
        // transaction, and taken only once it committed.
        store::AckedAndClaimed r =
            store::AckAndNextOfKey(ack.work(), ref, ids.front());
        a.deleted = r.acked;
        if (a.deleted == 1) {
          ack.work().commit();
          next->Take(std::move(r), absl::Now() - a.ack_start);
        }
      } else if (ack.started()) {
        a.deleted = store::DeleteClaimed(ack.work(), ref, ids);
        if (a.deleted == static_cast<int64_t>(ids.size())) ack.work().commit();
        // Otherwise the transaction rolls back as `ack` goes out of scope.
      } else if (next) {
        a.alone = true;
        store::AckedAndClaimed r = AckCarrying(ref, ids, *next);
        a.deleted = r.acked;
        next->Take(std::move(r), absl::Now() - a.ack_start);
      } else {
        a.alone = true;
        a.deleted = store::DeleteClaimedNow(*conn_, ref, ids);
      }
    }
  } catch (...) {
    Caught(a, ref, items);
  }
  return a;
}

PartWorker::Attempt PartWorker::CallInAck(const store::ClaimRef& ref,
                                          const std::vector<Item>& items,
                                          const std::vector<std::string>& ids,
                                          NextClaim* next) {
  // One autocommit statement: the fenced delete calls the function on the
  // items it deletes. Whatever it deleted is acknowledged, and handled.
  Attempt a;
  a.alone = true;
  a.ack_start = absl::Now();
  try {
    if (next && next->of_key) {
      store::AckedAndClaimed r =
          store::AckInFunctionAndNextOfKey(*conn_, ref, ids.front());
      a.deleted = r.acked;
      next->Take(std::move(r), absl::Now() - a.ack_start);
    } else if (config_.sql_function.arrays) {
      a.deleted = store::AckInFunctionOnArrays(*conn_, ref, ids);
    } else {
      // A function of single items gets one at a time (Batched()).
      a.deleted = store::AckInFunction(*conn_, ref, ids.front());
    }
  } catch (...) {
    // Committed or not after a broken connection: the items are read again
    // if they are still there.
    Caught(a, ref, items);
  }
  return a;
}

void PartWorker::Caught(Attempt& a, const store::ClaimRef& ref,
                        const std::vector<Item>& items) {
  try {
    throw;
  } catch (const pqxx::broken_connection&) {
    Disconnect(absl::UnavailableError("connection lost during ack"));
    a.ended = Outcome::kBroken;
  } catch (const pqxx::transaction_rollback& e) {
    a.ended = Conflict(ref, items, e.what());
  } catch (const pqxx::in_doubt_error& e) {
    // The commit may or may not have happened; the item is read again if
    // it is still there, and an ack that did commit deleted it for good.
    log_->error("part={} epoch={} commit outcome unknown: {}", ref.part,
                ref.epoch, e.what());
    Disconnect(absl::UnknownError("commit in doubt"));
    a.ended = Outcome::kBroken;
  } catch (const pqxx::sql_error& e) {
    if (store::SaysNothingOfTheItem(store::SqlStateOf(e))) {
      a.ended = Conflict(ref, items, e.what());
    } else if (InFunction()) {
      a.verdict = FunctionVerdict(e);  // the statement is the handler
    } else {
      a.verdict = store::StatusFromCurrentException("acknowledge");
    }
  } catch (...) {
    a.verdict = store::StatusFromCurrentException("acknowledge");
    if (absl::IsUnavailable(a.verdict)) {
      Disconnect(a.verdict);
      a.ended = Outcome::kBroken;
    }
  }
}

absl::Status PartWorker::FunctionVerdict(const pqxx::sql_error& e) const {
  const std::string& name = config_.sql_function.name;
  if (store::SqlStateOf(e) != "57014") {
    return store::SqlErrorVerdict(e, absl::StrCat("sql_function ", name));
  }
  const std::string limit =
      config_.transaction_pooler
          ? "the member role's statement_timeout (docs/POOLERS.md)"
          : absl::StrCat(
                "half the group's TTL (",
                absl::FormatDuration(WorkerOptions().statement_timeout), ")");
  return absl::DeadlineExceededError(absl::StrCat(
      "sql_function ", name,
      " was canceled (SQLSTATE 57014): it ran past the statement timeout, ",
      limit,
      ", the longest a function may hold its part's take, or someone "
      "canceled it. Make it faster, or raise the group's TTL"));
}

store::AckedAndClaimed PartWorker::AckCarrying(
    const store::ClaimRef& ref, const std::vector<std::string>& ids,
    const NextClaim& next) {
  if (next.runs) {
    return store::AckAndClaimRuns(*conn_, ref, ids, next.from, next.last,
                                  config_.claim_batch, *next.pass_over,
                                  next.continued);
  }
  if (next.of_key) return store::AckAndNextOfKey(*conn_, ref, ids.front());
  return store::AckAndClaim(*conn_, ref, ids, next.from, next.last,
                            config_.claim_batch);
}

PartWorker::Outcome PartWorker::HandleSingly(const store::ClaimRef& ref,
                                             const std::vector<Item>& items) {
  // Under per-key order a batch holds runs of a key's items: once one is
  // put back for a retry, the rest of its key stay unhandled behind it (in
  // the table, due, but no longer heads).
  std::set<uint64_t> waiting;
  for (const Item& item : items) {
    if (scheduler_.ShouldYield(ref.part, ref.epoch)) {
      return Outcome::kRetryLater;
    }
    const uint64_t block = BlockOf(*ParseUuid(item.id));
    if (waiting.count(block)) continue;
    const Outcome o = HandleBatch(ref, {item});
    if (!Settled(o)) return o;
    if (o == Outcome::kReleased && KeyOrder() && item.key) {
      waiting.insert(block);
    }
  }
  return Outcome::kFailed;
}

PartWorker::Outcome PartWorker::Conflict(const store::ClaimRef& ref,
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

PartWorker::Outcome PartWorker::ReleaseAfterConflict(
    const store::ClaimRef& ref, const std::vector<Item>& items, int in_a_row,
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
  auto released = store::ReleaseForRetry(*conn_, ref, ids, error, delay,
                                         /*count_attempt=*/false);
  if (!released.ok()) {
    if (absl::IsUnavailable(released.status())) {
      Disconnect(released.status());
    }
    return Outcome::kBroken;  // read again from the cursor
  }
  // The database set not_before before this clock read: never early.
  scheduler_.ExpectAt(absl::Now() + delay);
  return Outcome::kReleased;
}

PartWorker::Outcome PartWorker::Fail(const store::ClaimRef& ref,
                                     const Item& item, const std::string& error,
                                     bool dead_now, absl::Duration asked) {
  metrics_.Failed();
  config_.conflicts->Forget({item.id});  // "in a row" starts over
  const bool dead = dead_now || item.attempt >= config_.max_attempts;
  const absl::Duration delay = NextTryDelay(
      Backoff(item.attempt, config_.backoff_initial, config_.backoff_max),
      asked, config_.backoff_max);
  absl::StatusOr<bool> done;
  if (dead) {
    done = store::DeadLetter(*conn_, ref, item.id, error);
  } else {
    auto released = store::ReleaseForRetry(*conn_, ref, {item.id}, error, delay,
                                           /*count_attempt=*/true);
    if (released.ok()) {
      done = *released == 1;
    } else {
      done = released.status();
    }
  }
  if (!done.ok()) {
    if (absl::IsUnavailable(done.status())) {
      Disconnect(done.status());
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
