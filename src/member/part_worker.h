// One worker thread of a member: takes tasks from the PartScheduler, claims
// items in the part's key range, runs the handler and acknowledges each
// item exactly once (or releases it for retry, or dead-letters it).
//
// Connections follow work: a worker opens a connection of its own for
// claims when the member's budget has a slot and the server takes it, and
// closes it after idle_connection_timeout without tasks. Without one (no
// slot, a full server, or a probe that should not open one) it borrows the
// member's control connection for the task (LentConnection).
#ifndef SQLGROUP_MEMBER_PART_WORKER_H_
#define SQLGROUP_MEMBER_PART_WORKER_H_

#include <atomic>
#include <memory>
#include <optional>
#include <pqxx/connection>
#include <string>

#include "member/circuit_breaker.h"
#include "member/conflict_tally.h"
#include "member/failure_log.h"
#include "member/lent_connection.h"
#include "member/part_scheduler.h"
#include "metrics.h"
#include "sqlgroup/connection_budget.h"
#include "sqlgroup/consumer.h"
#include "store/connection.h"
#include "store/item_store.h"

namespace spdlog {
class logger;
}

namespace sqlgroup {

struct WorkerConfig {
  std::string dsn;
  std::string group;
  Handler handler;
  BatchHandler batch_handler;
  SqlFunction sql_function;  // ConsumerOptions::sql_function
  int claim_batch = 64;
  int max_attempts = 5;
  absl::Duration backoff_initial;
  absl::Duration backoff_max;
  absl::Duration connect_timeout;
  bool transaction_pooler = false;  // ConsumerOptions::transaction_pooler
  // Ends a transaction left idle for half of it (a paused process): the
  // group's TTL, which can be altered while the worker runs.
  std::shared_ptr<std::atomic<int64_t>> ttl_ns;
  // The group's ordering (true: 'key'), as the control loop last read it
  // with the settings: a change made in the database reaches running
  // members. Null: 'none'.
  std::shared_ptr<std::atomic<bool>> key_order;
  // Shared by the member's workers.
  std::shared_ptr<ConflictTally> conflicts = std::make_shared<ConflictTally>();
  std::shared_ptr<FailureLogLimiter> failure_log =
      std::make_shared<FailureLogLimiter>();
  // Opens when the handler fails every item (an outage of what it calls);
  // the part scheduler's gate (PartScheduler::SetGate) reads it.
  std::shared_ptr<CircuitBreaker> breaker =
      std::make_shared<CircuitBreaker>(CircuitBreaker::Options{});
  // The process's connection budget, and the member's control connection
  // to borrow. Required.
  std::shared_ptr<ConnectionBudget> budget;
  LentConnection* lent = nullptr;
  // A connection of the worker's own is closed after this long idle.
  absl::Duration idle_connection_timeout = absl::Seconds(10);
};

class PartWorker {
 public:
  PartWorker(int index, WorkerConfig config, PartScheduler& scheduler,
             MemberMetrics& metrics, std::shared_ptr<spdlog::logger> logger);

  // The thread body: returns when the scheduler shuts down.
  void Run();

 private:
  // kLost: the take is gone (or another take acknowledged the items);
  // kBroken: the connection broke, the outcome is unknown; kRetryLater:
  // stopped before handling (the part must yield). In the last two the
  // items are read again, if still there, from the sweep cursor.
  // kReleased: put back with a backoff (a failure or a conflict), so its
  // key waits for it.
  enum class Outcome {
    kAcked,
    kFailed,
    kReleased,
    kLost,
    kBroken,
    kRetryLater
  };
  static bool Settled(Outcome o) {
    return o == Outcome::kAcked || o == Outcome::kFailed ||
           o == Outcome::kReleased;
  }

  // A connection for the task: the worker's own, one opened now
  // (`own_wanted`, within the budget), or the control connection borrowed.
  // False when none can be had now.
  bool EnsureConnected(bool own_wanted);
  enum class Opened { kYes, kNoSlot, kFailed };
  // kNoSlot: the budget's slots are taken; kFailed: backing off after a
  // failed connect, or this one failed.
  Opened OpenOwn();
  // A slot of the budget for a connection of the worker's own, held from
  // before it opens until it closes.
  bool AcquireSlot(absl::Duration wait);
  void ReleaseSlot();
  bool BorrowControl(absl::Duration wait, bool with_slot = false);
  // Opens the worker's own connection after tasks on the borrowed one.
  void OpenAfterWarmTasks();
  // Runs the claim and acknowledgement statements once on the connection
  // in use, so that its first real ones are as fast as later ones.
  void WarmUp();
  // After each task: a borrowed connection goes back to the control thread.
  void GiveBack();
  void CloseOwn();
  // Whether to cut a batch short: the control thread waits for the
  // connection this worker borrowed.
  bool YieldControl() const;
  // The worker connection's options under the group's TTL now (its
  // idle-in-transaction limit), and setting them on the connection in use
  // (after the TTL was altered, or on a borrowed control connection; false:
  // the connection broke and was dropped).
  store::ConnectOptions WorkerOptions() const;
  bool FollowTtl();
  void RunClaim(PartTask& task);
  // The handler takes batches (a BatchHandler, or a SQL function on
  // arrays).
  bool Batched() const {
    return config_.batch_handler ||
           (InFunction() && config_.sql_function.arrays);
  }
  // The handler is a SQL function that the ack's statement calls.
  bool InFunction() const { return !config_.sql_function.name.empty(); }
  // The store's statements on `conn`, and the SQL function's.
  void PrepareStatements(pqxx::connection& conn);
  bool KeyOrder() const {
    return config_.key_order && config_.key_order->load();
  }
  // Under per-key order: the due heads of keys from `*from` on, walking on
  // until it finds some or has walked the whole range once (then none).
  // `*from` ends where the claim that found them started.
  absl::StatusOr<std::vector<Item>> ClaimKeyHeads(const PartTask& task,
                                                  Uuid128* from);
  // One item a claim offered to the scheduler (per-key order, single
  // items): handled, acknowledged or released, then its key is free.
  void RunItem(const PartTask& task);
  void RunProbe(const PartTask& task);
  void RunMeasureLag(const PartTask& task);
  // The part's next claim, to be sent with the ack of a batch when the
  // handler wrote nothing (one round trip for both): from `from`, past
  // the batch. `sent` once it went out, with its result in `items`.
  struct NextClaim {
    // The next item of the acknowledged one's key (NextOfKey), or a claim
    // along [from, last]: with `runs`, the batch handler's under per-key
    // order (ClaimRuns, with `continued` and `pass_over`).
    bool of_key = false;
    bool runs = false;
    bool continued = false;
    const std::vector<uint64_t>* pass_over = nullptr;
    Uuid128 from = 0;
    Uuid128 last = 0;
    bool sent = false;
    absl::StatusOr<std::vector<Item>> items;
    // With `runs`: the read reached the end of the range, or else goes on
    // at `resume`.
    bool exhausted = false;
    Uuid128 resume = 0;
    absl::Duration took;  // of the statement, ack and claim
    // The ack's statement `took` went out with this claim, and read `r`.
    void Take(store::AckedAndClaimed r, absl::Duration statement) {
      sent = true;
      items = std::move(r.next);
      exhausted = r.exhausted;
      resume = r.resume;
      took = statement;
    }
  };
  // The autocommitted ack of `ids` (a handler that wrote nothing) with the
  // claim `next` asks for, in one statement.
  store::AckedAndClaimed AckCarrying(const store::ClaimRef& ref,
                                     const std::vector<std::string>& ids,
                                     const NextClaim& next);
  struct Progress {
    // How many of the first items are settled (acknowledged, released with
    // a backoff or dead-lettered): the sweep goes on from the next one.
    size_t settled = 0;
    bool broken = false;  // stopped on kBroken
    bool acked = false;   // a batch handler's batch, acknowledged whole
  };
  // Items of one claim; stops early when the part must yield. With
  // `next`, a batch handler's ack may carry the next claim.
  Progress ProcessItems(const store::ClaimRef& ref,
                        const std::vector<Item>& items,
                        NextClaim* next = nullptr);
  Outcome HandleBatch(const store::ClaimRef& ref,
                      const std::vector<Item>& items,
                      NextClaim* next = nullptr);
  // One try of the handler and the ack of `items` (`ids`), for HandleBatch.
  struct Attempt {
    // Settled already: a broken connection or a conflict.
    std::optional<Outcome> ended;
    absl::Status verdict;  // the handler's
    int64_t deleted = -1;  // by the ack
    // The ack was autocommit: what it deleted is acknowledged, even when
    // others of the items were not.
    bool alone = false;
    // The handler had returned: an error is the ack's (a missing grant, a
    // broken schema), not the items'.
    bool acking = false;
    absl::Time ack_start;
  };
  // The handler (or batch handler) in its AckTransaction, then the ack.
  Attempt RunAndAck(const store::ClaimRef& ref, const std::vector<Item>& items,
                    const std::vector<std::string>& ids, NextClaim* next);
  // The sql_function, called by the ack's statement (store/function_ack.h).
  Attempt CallInAck(const store::ClaimRef& ref, const std::vector<Item>& items,
                    const std::vector<std::string>& ids, NextClaim* next);
  // Call only in a catch block, for an exception of either of the two
  // above: a broken connection or a commit in doubt end `a` (kBroken), an
  // error that says nothing of the items is a conflict; another SQL error
  // is the handler's verdict when the statement is the handler (the SQL
  // function's), else the error of the statement it came from.
  void Caught(Attempt& a, const store::ClaimRef& ref,
              const std::vector<Item>& items);
  // The SQL function's verdict on the error its statement raised.
  absl::Status FunctionVerdict(const pqxx::sql_error& e) const;
  // A batch that failed or kept conflicting, again item by item, so that
  // only the item at fault is counted against.
  Outcome HandleSingly(const store::ClaimRef& ref,
                       const std::vector<Item>& items);
  // A serialization failure, deadlock or lock timeout: release `items` with
  // a backoff, counting no attempt, unless an item has conflicted
  // kConflictsPerAttempt times in a row in this member: then it is a
  // failure (a handler that deadlocks every time must not be retried
  // forever). A batch that conflicts that often is tried item by item.
  Outcome Conflict(const store::ClaimRef& ref, const std::vector<Item>& items,
                   const std::string& error);
  // Releases `items` with a backoff for `in_a_row` conflicts, counting no
  // attempt.
  Outcome ReleaseAfterConflict(const store::ClaimRef& ref,
                               const std::vector<Item>& items, int in_a_row,
                               const std::string& error);
  // The first pass of a take after its part's previous owner died: the
  // `items` claimed that were due then count an attempt (Item::attempt
  // follows), and those that reach max_attempts are dead-lettered and left
  // out. False when the connection broke.
  bool CountDeliveriesOfTheDead(const PartTask& task, std::vector<Item>& items);
  // After an admitted single item's call: its outcome for the breaker
  // (`verdict` OK: handled), and what a change of state makes the member
  // do and say.
  void RecordOutcome(const store::ClaimRef& ref, const absl::Status& verdict,
                     const std::string& item_id);
  // The handler failed on `item`: retry later or dead-letter (at once when
  // `dead_now`: the handler said so, see DeadLetterVerdict). A retry comes
  // after the backoff, or after `asked` (RetryAfterVerdict) when that is
  // later, `asked` capped at backoff_max.
  Outcome Fail(const store::ClaimRef& ref, const Item& item,
               const std::string& error, bool dead_now = false,
               absl::Duration asked = absl::ZeroDuration());
  void Disconnect(const absl::Status& why);
  void SleepBackoff();

  const int index_;
  const WorkerConfig config_;
  PartScheduler& scheduler_;
  MemberMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;
  // How long a worker waits for the control connection to be lent, and,
  // after a task went back for want of a slot, for a slot to free up.
  static constexpr absl::Duration kBorrowWait = absl::Milliseconds(200);
  // How long the first claim after a quiet spell waits for the control
  // connection before it opens a connection of its own instead (about the
  // cost of opening one; it is mostly free at once).
  static constexpr absl::Duration kWarmBorrowWait = absl::Milliseconds(5);
  static constexpr int kWarmTasks = 4;
  static constexpr absl::Duration kStarvedWait = absl::Seconds(1);
  static constexpr absl::Duration kContendedCheck = absl::Milliseconds(100);
  // A connection of its own held this long goes after a task when another
  // worker waits for a slot.
  static constexpr absl::Duration kShareAfter = absl::Seconds(1);

  std::unique_ptr<pqxx::connection> own_;
  store::ConnectionTimeouts own_timeouts_;  // own_'s
  // The connection of the task at hand (own_, or the control connection
  // borrowed), and what is known of its session.
  pqxx::connection* conn_ = nullptr;
  store::ConnectionTimeouts* timeouts_ = nullptr;
  // While the control connection is borrowed: it, and what is known of
  // its session.
  pqxx::connection* borrowed_conn_ = nullptr;
  LentConnection::Session* borrowed_session_ = nullptr;
  bool borrowed() const { return borrowed_session_ != nullptr; }
  bool borrowed_broken_ = false;  // tell the control thread on GiveBack
  absl::Time last_work_ = absl::InfinitePast();  // the last claim or item
  absl::Time own_since_ = absl::InfinitePast();  // own_ opened
  absl::Time next_own_try_ = absl::InfinitePast();
  bool refused_ = false;  // the server refused the last try (an episode)
  bool slot_ = false;     // holds a slot of the budget
  bool starved_ = false;  // a task went back: no slot was free
  // Tasks borrowed the control connection for want of a connection of the
  // worker's own, which it opens when no task waits, or after kWarmTasks of
  // them.
  bool open_after_ = false;
  int warm_tasks_ = 0;
  // The control thread abandoned the connection this worker borrowed: no
  // first claims on the control connection until it had one of its own.
  bool abandoned_ = false;
  int connect_failures_ = 0;
  int broken_in_a_row_ = 0;  // claims that ended on kBroken, in a row
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_PART_WORKER_H_
