// Settles the items a worker claimed: runs the handler (or has the ack's
// statement call the SQL function) and acknowledges each item exactly
// once in a transaction fenced on the take, or releases it for a retry
// with a backoff, or dead-letters it. Conflicts (serialization failures,
// deadlocks) release without counting an attempt, until one item keeps
// conflicting; a failed batch is tried again item by item. The circuit
// breaker judges single items' outcomes. It writes through store::ItemAcks
// and reaches its connection through TaskConnection, so its unit tests run
// on fakes.
//
// Thread safety: one worker thread.
#ifndef SQLGROUP_MEMBER_SETTLER_H_
#define SQLGROUP_MEMBER_SETTLER_H_

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "member/circuit_breaker.h"
#include "member/conflict_tally.h"
#include "member/failure_log.h"
#include "member/gathered_acks.h"
#include "member/handler_kind.h"
#include "member/part_scheduler.h"
#include "member/shared_commit.h"
#include "member/task_connection.h"
#include "metrics.h"
#include "sqlgroup/consumer.h"
#include "store/item_acks.h"

namespace spdlog {
class logger;
}

namespace sqlgroup {

// How long claimed items may wait in the member (heads for a free worker,
// the rest of a batch behind a slow handler) and still go to a handler
// without a new read: a claim writes nothing, so a pause or a cancel that
// committed since is seen only by reading again (Settler::DueRunEnd).
// Bounds how late after a pause commits a delivery can begin.
inline constexpr absl::Duration kClaimFreshFor = absl::Milliseconds(250);

struct SettlerConfig {
  std::string group;
  Handler handler;
  BatchHandler batch_handler;
  HandlerKind kind;
  int claim_batch = 64;
  // A SQL function's calls a worker groups into one transaction
  // (ConsumerOptions::sql_calls_per_commit); 1: none.
  int sql_calls_per_commit = 1;
  int max_attempts = 5;
  absl::Duration backoff_initial;
  absl::Duration backoff_max;
  bool transaction_pooler = false;
  // The group's ordering (true: 'key'). Null: 'none'.
  std::shared_ptr<std::atomic<bool>> key_order;
  // Shared by the member's workers.
  std::shared_ptr<ConflictTally> conflicts = std::make_shared<ConflictTally>();
  std::shared_ptr<FailureLogLimiter> failure_log =
      std::make_shared<FailureLogLimiter>();
  // Opens when the handler fails every item (an outage of what it calls);
  // the part scheduler's gate (PartScheduler::SetGate) reads it.
  std::shared_ptr<CircuitBreaker> breaker =
      std::make_shared<CircuitBreaker>(CircuitBreaker::Options{});
  // The acks that run alone (a handler that wrote nothing, no claim
  // carried) share commits with the member's other workers' through it.
  // Null: each its own.
  std::shared_ptr<SharedCommit> shared_commit;
};

class Settler {
 public:
  // kLost: the take is gone (or another take acknowledged the items);
  // kBroken: the connection broke, the outcome is unknown; kRetryLater:
  // stopped before handling (the part must yield). In the last two the
  // items are read again, if still there, from the sweep cursor.
  // kReleased: put back with a backoff (a failure or a conflict), so its
  // key waits for it. kGathered: handled, its ack gathered (GatheredAcks):
  // settled once CommitGathered says so.
  enum class Outcome {
    kAcked,
    kFailed,
    kReleased,
    kLost,
    kBroken,
    kRetryLater,
    kGathered
  };
  static bool Settled(Outcome o) {
    return o == Outcome::kAcked || o == Outcome::kFailed ||
           o == Outcome::kReleased;
  }

  // The part's next claim, to be sent with the ack of a batch when the
  // handler wrote nothing (one round trip for both): from `ask.from`, past
  // the batch. `sent` once it went out, with its result in `items`.
  struct NextClaim {
    // What to read (its limit is the settler's: claim_batch).
    store::CarriedClaim ask;
    bool sent = false;
    absl::StatusOr<std::vector<Item>> items;
    // With `runs`: the read reached the end of the range, or else goes on
    // at `resume`.
    bool exhausted = false;
    Uuid128 resume = 0;
    absl::Duration took;    // of the statement, ack and claim
    absl::Time claimed_at;  // when that statement was sent
    // What the store is asked to read with the ack.
    store::CarriedClaim Carried(int limit) const {
      store::CarriedClaim carry = ask;
      carry.limit = limit;
      return carry;
    }
    // The ack's statement `took` went out with this claim, and read `r`.
    void Take(store::AckedAndClaimed r, absl::Duration statement) {
      sent = true;
      items = std::move(r.next);
      exhausted = r.exhausted;
      resume = r.resume;
      took = statement;
      claimed_at = absl::Now() - statement;
    }
  };

  struct Progress {
    // How many of the first items are settled (acknowledged, released with
    // a backoff or dead-lettered): the sweep goes on from the next one.
    size_t settled = 0;
    bool broken = false;  // stopped on kBroken
    bool acked = false;   // a batch handler's batch, acknowledged whole
  };

  Settler(int index, SettlerConfig config, store::ItemAcks& acks,
          TaskConnection& connection, PartScheduler& scheduler,
          MemberMetrics& metrics, std::shared_ptr<spdlog::logger> logger);

  // Items of one claim, read at `claimed_at`; stops early when the part
  // must yield, and at an item no longer due when the claim is read again
  // (DueRunEnd, once it is older than kClaimFreshFor). With `next`, a
  // batch handler's ack may carry the next claim. With `gather`, the acks
  // of single items whose handler wrote nothing are gathered, and
  // committed before it returns.
  Progress ProcessItems(const store::ClaimRef& ref,
                        const std::vector<Item>& items, absl::Time claimed_at,
                        NextClaim* next = nullptr, bool gather = false);
  // Where the run of `items` from `from` on that may still go to a
  // handler ends: at the first the database no longer finds waiting, due
  // and unpaused (store::StillDue). Not OK only when the connection broke
  // (it is dropped); another failure to read hands them all out, as
  // claimed.
  absl::StatusOr<size_t> DueRunEnd(const store::ClaimRef& ref,
                                   const std::vector<Item>& items, size_t from);
  // `items` as one call of the handler (one item, or a batch handler's
  // batch), and their ack. With `gather`, a single item whose handler wrote
  // nothing leaves its ack with the gathered ones (kGathered), unless a
  // claim goes with it (`next`).
  Outcome HandleBatch(const store::ClaimRef& ref,
                      const std::vector<Item>& items, NextClaim* next = nullptr,
                      bool gather = false);
  // The acks gathered and not yet committed, and whether they are to
  // commit before another handler call (GatheredAcks::Due).
  // (With the outcomes of those the settler had to commit itself, before a
  // statement of another kind: CommitGathered hands them over.)
  size_t gathered() const { return gathered_.size() + resolved_.size(); }
  // A transaction of grouped calls is open on the connection: no other
  // statement may run on it before CommitGathered.
  bool CallsOpen() const { return acks_.CallsOpen(); }
  bool GatheredDue(absl::Time now) const {
    return gathered_.Due(now) || !resolved_.empty();
  }
  // What the commit of the gathered acks made of each: kAcked; kLost (the
  // take is gone, or another take acknowledged it); kReleased or kFailed
  // (a conflict: each went back as after a conflict of its own ack,
  // Conflict); kBroken (the connection broke or was gone, or the statement
  // failed: the outcome is unknown, or nothing was written; read again if
  // still there).
  struct Gathered {
    std::string id;
    Outcome outcome;
  };
  // Commits the gathered acks as one fenced statement (through the
  // member's SharedCommit when it has one), on the connection at hand; a
  // SQL function's grouped calls with their transaction's COMMIT.
  std::vector<Gathered> CommitGathered();
  // The first pass of a take after its part's previous owner died at
  // `died_at`: the `items` claimed that were due then count an attempt
  // (Item::attempt follows), and those that reach max_attempts are
  // dead-lettered and left out. False when the connection broke. Items up
  // to `counted`'s mark (counted by an earlier claim of the same pass) are
  // not counted again; the mark moves past `items`. `counted` may be null.
  bool CountDeliveriesOfTheDead(const store::ClaimRef& ref, absl::Time died_at,
                                DeadCounted* counted, std::vector<Item>& items);

 private:
  // Which of `items` from `from` on may still go to a handler
  // (store::StillDue), with DueRunEnd's handling of a failed read.
  absl::StatusOr<std::set<std::string>> StillDueIds(
      const store::ClaimRef& ref, const std::vector<Item>& items, size_t from);
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
    bool gathered = false;  // the ack waits in gathered_
  };
  bool KeyOrder() const {
    return config_.key_order && config_.key_order->load();
  }
  // The handler (or batch handler) in its AckTransaction, then the ack.
  Attempt RunAndAck(const store::ClaimRef& ref, const std::vector<Item>& items,
                    const std::vector<std::string>& ids, NextClaim* next,
                    bool gather);
  // The sql_function, called by the ack's statement (store/function_ack.h);
  // with `gather`, grouped with the calls that follow into one transaction
  // (store/grouped_calls.h) where the connection allows it.
  Attempt CallInAck(const store::ClaimRef& ref, const std::vector<Item>& items,
                    const std::vector<std::string>& ids, NextClaim* next,
                    bool gather);
  // The gathered acks committed (CommitGathered's work, without the
  // outcomes resolved before).
  std::vector<Gathered> CommitGatheredNow();
  // CommitGatheredNow, its outcomes kept in resolved_ for CommitGathered
  // (the worker hears of them there).
  void SettleGatheredAside();
  // Ends a transaction of grouped calls with nothing of theirs to keep
  // (each call's take was gone).
  void EndEmptyCalls();
  // The store, for any statement but a grouped call: grouped calls commit
  // first (their outcomes wait in resolved_), or the statement would run
  // in their transaction.
  store::ItemAcks& Acks();
  // The store's `error` (store/item_acks.h) of either of the two above: a
  // broken connection or a commit in doubt end `a` (kBroken), a conflict
  // ends it as Conflict says; another error is the handler's verdict when
  // the statement is the handler (the SQL function's), else the error of
  // the statement it came from.
  void Failed(Attempt& a, const absl::Status& error, const store::ClaimRef& ref,
              const std::vector<Item>& items);
  // The ack of `ids` in the member's next shared commit (SharedCommit).
  void AckShared(Attempt& a, const store::ClaimRef& ref,
                 const std::vector<std::string>& ids,
                 const std::vector<Item>& items);
  // The fenced delete of `takes` in the member's next shared commit,
  // whether it deleted each (by place); when another worker's connection
  // broke under it, again alone on this one, with that error in
  // `*elsewhere` (then an item it did not delete may have been deleted by
  // the shared statement).
  absl::StatusOr<std::vector<bool>> DeleteShared(
      const std::vector<store::TakeItem>& takes, absl::Status* elsewhere);
  // The SQL function's verdict: a cancel says which limit it ran into.
  absl::Status FunctionVerdict(const absl::Status& verdict) const;
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

  const int index_;
  const SettlerConfig config_;
  store::ItemAcks& acks_;
  TaskConnection& connection_;
  PartScheduler& scheduler_;
  MemberMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;
  GatheredAcks gathered_;
  // Outcomes of gathered acks committed by Acks(), for CommitGathered.
  std::vector<Gathered> resolved_;
  // A COMMIT of grouped calls was refused (a deferred constraint, say):
  // until then each call commits alone, so the item at fault gets its
  // verdict.
  absl::Time grouping_refused_until_ = absl::InfinitePast();
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_SETTLER_H_
