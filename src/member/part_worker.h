// One worker thread of a member: takes tasks from the PartScheduler and
// runs them: claims items in the part's key range (the sweep, with its
// cursor), has the Settler handle and acknowledge them, probes idle parts
// and measures lag. Its connection is a WorkerConnection (its own or the
// control connection borrowed).
#ifndef SQLGROUP_MEMBER_PART_WORKER_H_
#define SQLGROUP_MEMBER_PART_WORKER_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "member/circuit_breaker.h"
#include "member/conflict_tally.h"
#include "member/failure_log.h"
#include "member/lent_connection.h"
#include "member/part_scheduler.h"
#include "member/settler.h"
#include "member/worker_connection.h"
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
  // Its connection: the worker's own, or the control connection borrowed.
  WorkerConnectionConfig connection;
  // Its handler, retry policy and circuit breaker; `settle.group`,
  // `settle.key_order` and `settle.claim_batch` serve the sweep too.
  SettlerConfig settle;
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
  // How a claim task ends: what the scheduler hears (FinishClaim).
  struct ClaimEnd {
    bool found = false;         // the part stays in the rotation
    Uuid128 cursor = 0;         // where its next claim reads from
    int turn = 0;               // PartTask::turn of that claim
    std::vector<Item> claimed;  // its batch, read already
    absl::Time claimed_at;      // when `claimed` was read
    // The same items would fail the same way at once: the part waits
    // this long (or for a probe).
    absl::Duration rest = absl::ZeroDuration();
    bool offered = false;  // ended by PartScheduler::Offer instead
  };
  void RunClaim(PartTask& task);
  // Claims from the task's cursor, has the settler handle the batches
  // (the next one carried by each ack while the part may go on), and says
  // where the sweep stopped.
  ClaimEnd Sweep(PartTask& task);
  // Under per-key order: the due heads of keys from `*from` on, walking on
  // until it finds some or has walked the whole range once (then none).
  // `*from` ends where the claim that found them started.
  absl::StatusOr<std::vector<Item>> ClaimKeyHeads(const PartTask& task,
                                                  Uuid128* from);
  // Whether a kItem task's head may still go to the handler: read again
  // (Settler::DueRunEnd) when it waited past kClaimFreshFor for a worker.
  absl::StatusOr<bool> StillDueAfterWaiting(const PartTask& task);
  // One item a claim offered to the scheduler (per-key order, single
  // items): handled, acknowledged or released, then its key is free.
  void RunItem(const PartTask& task);
  void RunProbe(const PartTask& task);
  void RunMeasureLag(const PartTask& task);
  // The lag and blocked keys of the task's parts.
  void MeasureParts(const PartTask& task);
  // With the lag, by the member that reports the group's own facts
  // (PartTask::group_facts): removes the group's dead
  // letters past its retention and reports its dead letters and pauses.
  void MeasureGroup();
  // Whether a single item's ack may wait with the gathered ones
  // (GatheredAcks), or a SQL function's call join a transaction of grouped
  // calls (store/grouped_calls.h; where the connection allows it): on a
  // connection of the worker's own (a borrowed one is the control
  // thread's to have back), for a handler of single items.
  bool Gathers() const {
    return connection_.own() && !Batched() &&
           (!config_.settle.kind.in_function() ||
            config_.settle.sql_calls_per_commit > 1);
  }
  // Whether the worker may take `task` with acks gathered: an unkeyed
  // item under per-key order (the Offer path, whose keys stay busy until
  // the commit), while the gathering is not due and no part of the
  // gathered acks must yield.
  bool GatherPast(const PartTask& task) const;
  // Commits the gathered acks (Settler::CommitGathered), on the
  // connection at hand or one acquired for them, and tells the scheduler
  // each of their items is done.
  void CommitGathered();
  // The handler takes batches (a BatchHandler, or a SQL function on
  // arrays).
  bool Batched() const { return config_.settle.kind.batched; }
  bool KeyOrder() const {
    return config_.settle.key_order && config_.settle.key_order->load();
  }

  // After a task went back for want of a slot, how long a worker waits
  // for one before it takes another.
  static constexpr absl::Duration kStarvedWait = absl::Seconds(1);
  static constexpr absl::Duration kContendedCheck = absl::Milliseconds(100);
  // A connection of its own held this long goes after a task when another
  // worker waits for a slot.
  static constexpr absl::Duration kShareAfter = absl::Seconds(1);

  const int index_;
  const WorkerConfig config_;
  PartScheduler& scheduler_;
  MemberMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;
  WorkerConnection connection_;
  Settler settler_;
  // The kItem tasks whose last item's ack is gathered, by that item's id:
  // finished (PartScheduler::FinishItem) once the ack committed.
  struct GatheredTask {
    int part = 0;
    int64_t epoch = 0;
    Item item;  // the task's, without its payload
  };
  std::map<std::string, GatheredTask> gathered_tasks_;

  absl::Time last_work_ = absl::InfinitePast();  // the last claim or item
  int broken_in_a_row_ = 0;      // claims that ended on kBroken, in a row
  bool told_no_expire_ = false;  // said once that the role may not expire
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_PART_WORKER_H_
