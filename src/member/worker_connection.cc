#include "member/worker_connection.h"

#include <algorithm>
#include <pqxx/pqxx>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "member/backoff.h"
#include "schema_skew.h"
#include "spdlog/spdlog.h"
#include "store/errors.h"
#include "store/function_ack.h"
#include "store/item_store.h"

namespace sqlgroup {

WorkerConnection::WorkerConnection(int index, WorkerConnectionConfig config,
                                   HandlerKind kind, MemberMetrics& metrics,
                                   std::shared_ptr<spdlog::logger> logger)
    : index_(index),
      config_(std::move(config)),
      kind_(std::move(kind)),
      metrics_(metrics),
      log_(std::move(logger)) {}

bool WorkerConnection::Acquire(bool own_wanted) {
  // Its own connection's statements were prepared for another schema:
  // prepared again, or, failing that, the connection goes (CloseOwn).
  if (own_ && own_schema_ != SchemaNow()) PrepareOwn();
  return Connect(own_wanted) && FollowTtl();
}

void WorkerConnection::WaitForSlot(absl::Duration wait) {
  starved_ = false;
  AcquireSlot(wait);
}

void WorkerConnection::AfterTask() {
  GiveBack();
  // Not for a whole burst: the control thread has its own work.
  if (open_after_ && ++warm_tasks_ >= kWarmTasks) OpenAfterWarmTasks();
}

void WorkerConnection::WarmBorrowed() {
  if (!borrowed() || borrowed_session_->warm) return;
  WarmUp();
  borrowed_session_->warm = true;
}

bool WorkerConnection::Connect(bool own_wanted) {
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
  // worker and goes on with a new one on that slot (ControlChannel::TakeBack).
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

bool WorkerConnection::AcquireSlot(absl::Duration wait) {
  if (!slot_) slot_ = config_.budget->TryAcquire(wait);
  return slot_;
}

void WorkerConnection::ReleaseSlot() {
  if (slot_) config_.budget->Release();
  slot_ = false;
}

WorkerConnection::Opened WorkerConnection::OpenOwn() {
  if (absl::Now() < next_own_try_) return Opened::kFailed;
  if (!AcquireSlot(absl::ZeroDuration())) return Opened::kNoSlot;
  const store::ConnectOptions options = Options();
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
  if (!PrepareOwn()) return Opened::kFailed;
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

void WorkerConnection::PrepareStatements(pqxx::connection& conn, int schema) {
  const bool pauses = schema >= internal::kPausesFrom;
  store::PrepareItemStatements(conn, pauses);
  if (kind_.in_function()) {
    store::PrepareFunctionAcks(conn, kind_.sql_function, pauses);
  }
}

bool WorkerConnection::PrepareOwn() {
  const int schema = SchemaNow();
  const absl::Status s =
      store::Guard("prepare", [&] { PrepareStatements(*own_, schema); });
  if (!s.ok()) {
    log_->warn("worker={} dropping connection: {}", index_,
               std::string(s.message()));
    CloseOwn();
    return false;
  }
  own_schema_ = schema;
  return true;
}

void WorkerConnection::OpenAfterWarmTasks() {
  open_after_ = false;
  warm_tasks_ = 0;
  // Ready for the next claim; without a slot now, it borrows again.
  if (!own_ && OpenOwn() == Opened::kYes) WarmUp();
}

void WorkerConnection::WarmUp() {
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
    } else if (kind_.batched) {
      (void)store::ClaimRuns(*conn_, ref, at, at, 1, {}, false);
    } else {
      (void)store::ClaimHeads(*conn_, ref, at, at, 1, 1, {});
    }
    if (kind_.sql_function.arrays) {
      store::AckInFunctionOnArrays(*conn_, ref, {nil});
    } else if (kind_.batched) {
      store::DeleteClaimedNow(*conn_, ref, {nil, nil});
    } else if (kind_.in_function()) {
      // Single items: an unkeyed one alone, a keyed one with the read of
      // its key's next.
      store::AckInFunction(*conn_, ref, nil);
      if (KeyOrder()) store::AckInFunctionAndNextOfKey(*conn_, ref, nil);
    } else {
      store::DeleteClaimedNow(*conn_, ref, {nil});
      if (KeyOrder()) store::AckAndNextOfKey(*conn_, ref, nil);
    }
    // A handler that writes nothing may have its acks shared: two items,
    // since one goes through the single ack above.
    if (config_.shared_acks && !kind_.in_function()) {
      store::DeleteOfTakes(*conn_, config_.group,
                           {{nil, nil, 0, 0}, {nil, nil, 0, 0}});
    }
  });
  if (absl::IsUnavailable(s)) Disconnect(s);
}

bool WorkerConnection::BorrowControl(absl::Duration wait, bool with_slot) {
  // The session stays valid until the connection is given back, even
  // should the control thread abandon the connection meanwhile.
  pqxx::connection* home =
      config_.lent->Borrow(wait, with_slot, &borrowed_session_);
  if (home == nullptr) return false;  // the control thread has it
  conn_ = home;
  borrowed_conn_ = home;  // conn_ is cleared if it breaks
  timeouts_ = &borrowed_session_->timeouts;
  metrics_.Borrowed();
  if (const int schema = SchemaNow();
      borrowed_session_->item_statements != schema) {
    absl::Status s =
        store::Guard("prepare", [&] { PrepareStatements(*conn_, schema); });
    if (!s.ok()) {
      Disconnect(s);
      GiveBack();  // nothing ran on it
      return false;
    }
    borrowed_session_->item_statements = schema;
  }
  return true;
}

void WorkerConnection::GiveBack() {
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

void WorkerConnection::CloseOwn() {
  if (own_) {
    if (conn_ == own_.get()) conn_ = nullptr;
    own_.reset();
    metrics_.ConnectionClosed("worker");
  }
  ReleaseSlot();
}

store::ConnectOptions WorkerConnection::Options() const {
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
  if (kind_.in_function()) {
    options.statement_timeout = options.idle_in_transaction_timeout;
  }
  options.transaction_pooler = config_.transaction_pooler;
  return options;
}

bool WorkerConnection::FollowTtl() {
  const absl::StatusOr<bool> set = timeouts_->Follow(*conn_, Options());
  if (!set.ok()) {
    Disconnect(set.status());
    return false;
  }
  return true;
}

bool WorkerConnection::YieldControl() const {
  return borrowed() && config_.lent->Wanted();
}

void WorkerConnection::Disconnect(const absl::Status& why) {
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

void WorkerConnection::SleepBackoff() const {
  std::this_thread::sleep_for(absl::ToChronoMilliseconds(
      Backoff(connect_failures_, absl::Milliseconds(50), absl::Seconds(2))));
}

}  // namespace sqlgroup
