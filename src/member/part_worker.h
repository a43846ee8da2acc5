// One worker thread of a member: takes tasks from the PartScheduler, claims
// items in the part's key range, runs the handler and acknowledges each
// item exactly once (or releases it for retry, or dead-letters it). Owns one
// database connection, reconnecting with backoff.
#ifndef SQLGROUP_MEMBER_PART_WORKER_H_
#define SQLGROUP_MEMBER_PART_WORKER_H_

#include <atomic>
#include <memory>
#include <pqxx/connection>
#include <string>

#include "member/conflict_tally.h"
#include "member/part_scheduler.h"
#include "metrics.h"
#include "sqlgroup/consumer.h"
#include "store/connection.h"

namespace spdlog {
class logger;
}

namespace sqlgroup {

struct WorkerConfig {
  std::string dsn;
  std::string group;
  Handler handler;
  BatchHandler batch_handler;
  int claim_batch = 64;
  int max_attempts = 5;
  absl::Duration backoff_initial;
  absl::Duration backoff_max;
  absl::Duration connect_timeout;
  bool transaction_pooler = false;  // ConsumerOptions::transaction_pooler
  // Ends a transaction left idle this long (a paused process): the group's
  // TTL, which can be altered while the worker runs.
  std::shared_ptr<std::atomic<int64_t>> ttl_ns;
  // The group's ordering (true: 'key'), as the control loop last read it
  // with the settings: a change made in the database reaches running
  // members. Null: 'none'.
  std::shared_ptr<std::atomic<bool>> key_order;
  // Shared by the member's workers.
  std::shared_ptr<ConflictTally> conflicts = std::make_shared<ConflictTally>();
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

  bool EnsureConnected();
  // The worker connection's options under the group's TTL now (its
  // idle-in-transaction limit), and setting them on the open connection
  // when the TTL was altered (false: the connection broke and was dropped).
  store::ConnectOptions WorkerOptions() const;
  bool FollowTtl();
  void RunClaim(const PartTask& task);
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
    // along [from, last].
    bool of_key = false;
    Uuid128 from = 0;
    Uuid128 last = 0;
    bool sent = false;
    absl::StatusOr<std::vector<Item>> items;
    absl::Duration took;  // of the statement, ack and claim
  };
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
  // The handler failed on `item`: retry later or dead-letter (at once when
  // `dead_now`: the handler said so, see DeadLetterVerdict).
  Outcome Fail(const store::ClaimRef& ref, const Item& item,
               const std::string& error, bool dead_now = false);
  void Disconnect(const absl::Status& why);
  void SleepBackoff();

  const int index_;
  const WorkerConfig config_;
  PartScheduler& scheduler_;
  MemberMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<pqxx::connection> conn_;
  store::ConnectionTimeouts timeouts_;  // conn_'s
  int connect_failures_ = 0;
  int broken_in_a_row_ = 0;  // claims that ended on kBroken, in a row
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_PART_WORKER_H_
