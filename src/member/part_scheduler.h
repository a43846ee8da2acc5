// Hands a member's owned parts to its worker threads, fairly and one worker
// per part at a time. Parts with work go round-robin; a part whose last
// claim found nothing goes idle and costs nothing until one probe query for
// all idle parts (on a producer's NOTIFY, or every idle_poll) finds it has
// work again. No database in here: workers run the queries.
//
// A member that LISTENs and has seen no sign of work (a claim that found
// items, a probe that found some, a NOTIFY) for `warm_for` probes less
// often: producers' NOTIFYs wake it at once, and items due later (retried
// after a backoff, enqueued with a delay) are probed for when they fall due
// (ExpectAt). Only what nobody announces waits for the rare poll. The
// sign of work that ends a quiet spell starts the short poll an idle_poll
// later: the parts it names are claimed first.
//
// Thread safety: all methods are safe to call from any thread.
#ifndef SQLGROUP_MEMBER_PART_SCHEDULER_H_
#define SQLGROUP_MEMBER_PART_SCHEDULER_H_

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "keyspace.h"
#include "member/range_index.h"
#include "sqlgroup/item.h"
#include "store/model.h"

namespace sqlgroup {

// How far along its range the first pass of a take after a dead
// predecessor has counted the items it claimed (PartTask::dead_counted):
// a claim that reads items again (after a yield, or from one no longer due)
// counts each of them once.
struct DeadCounted {
  absl::Mutex mu;
  std::optional<Uuid128> through ABSL_GUARDED_BY(mu);
};

struct PartTask {
  // kIdle: nothing came by the time the worker asked to hear of it.
  enum class Kind { kClaim, kItem, kProbe, kMeasureLag, kIdle, kStop };
  Kind kind = Kind::kStop;
  // kClaim: the take to claim under, its range and the sweep cursor.
  // kItem: the take and one item claimed under it, to handle.
  store::ClaimRef ref;
  KeyRange range{};
  Uuid128 cursor = 0;
  // kClaim: the count of the part's finished keys when the claim was handed
  // out (Offer tells by it which keys finished while it read), and the
  // keys offered or with a handler then, which the claim need not read.
  uint64_t finished = 0;
  std::vector<uint64_t> busy_keys;
  // kClaim, batch handlers under per-key order: how many claims in a row
  // ended in the key at the cursor (its turn so far; the cursor is then
  // right after the items the last of them settled), 0 otherwise.
  int turn = 0;
  // kClaim, batch handlers: the part's next batch, claimed already (read
  // from `cursor` by the last batch's ack), when there is one.
  std::vector<Item> claimed;
  Item item;
  // When `item` (kItem) or `claimed` (kClaim) was read: items that waited
  // past kClaimFreshFor are read again before a handler gets them.
  absl::Time claimed_at = absl::InfinitePast();
  // kProbe: the idle parts to look at; kMeasureLag: every owned part.
  std::vector<int> probe_parts;
  // kMeasureLag: this member reports the group's dead letters and pauses
  // (ReportGroup), with or without parts.
  bool group_facts = false;
  std::vector<KeyRange> probe_ranges;
  // kProbe and kClaim: when the announcement of items that led here was
  // heard (InfinitePast: none did); for the stage breakdown of latency.
  absl::Time heard = absl::InfinitePast();
  // kClaim, during the first pass of a take over its range after the
  // part's previous owner died: when it did (Owner::predecessor_died_at).
  // The items the claim hands out that were due then may have been with
  // its handler: each counts an attempt (store::CountDeliveriesOfTheDead).
  std::optional<absl::Time> predecessor_died_at;
  std::shared_ptr<DeadCounted> dead_counted;  // with predecessor_died_at
};

class PartScheduler {
 public:
  // Idle parts are probed every `idle_poll`; the lag of owned parts is
  // measured every `lag_interval` (zero: never). While listening and no sign
  // of work came for `warm_for`, idle parts are probed every
  // `idle_poll_listening` (>= idle_poll) instead.
  PartScheduler(absl::Duration idle_poll, absl::Duration lag_interval,
                absl::Duration idle_poll_listening = absl::ZeroDuration(),
                absl::Duration warm_for = absl::ZeroDuration());

  // Control thread. Add starts a new take (idle until the next probe, which
  // it asks for; a take whose part a worker still holds under an older
  // epoch is served when that worker finishes); Revoke stops
  // handing the part out (a batch in flight finishes); Remove forgets it (a
  // worker still on it sees ShouldYield and stops between items).
  void Add(const store::ClaimRef& ref, KeyRange range,
           std::optional<absl::Time> predecessor_died_at = std::nullopt);
  void Revoke(int part);
  void Unrevoke(int part);
  void Remove(int part);
  // Whether this member reports the group's own facts (dead letters,
  // pauses; the retention's removals) with its lag measurements: then they
  // run even while it owns no part, and every kGroupFactsInterval when lag
  // is not measured (lag_interval zero: no metrics registry).
  void ReportGroup(bool yes);
  // The parts added and not removed, with their takes' epochs: the one
  // record of which parts the member runs.
  std::map<int, int64_t> Parts() const;
  // Whether an item of `part` is with a handler.
  bool Busy(int part) const;
  // Whether an item of any part is; probes and lag reads do not count (they
  // only read, so a leave need not wait for them).
  bool AnyBusy() const;
  // The parts an item (or a claim) of is with a worker, ascending.
  std::vector<int> BusyParts() const;
  // Items arrived (a producer's NOTIFY): probe the idle parts now.
  void WakeIdle();
  // Items arrived in `ranges` (a producer's NOTIFY naming where): the
  // owned parts that hold any of those keys are claimed at once, without a
  // probe; the others stay as they are. A part whose claim is out is
  // claimed again after it (that claim may have read before the commit).
  // A member that owns none of them does nothing.
  void WakeParts(const std::vector<KeyRange>& ranges);
  // Items fall due at `due` (an item released for retry, a producer's
  // NOTIFY of delayed items, a probe's look-ahead): probe the idle parts
  // then, or up to kExpectMerge later when another due time is that close.
  void ExpectAt(absl::Time due);
  // Whether NOTIFYs reach the member (the control connection LISTENs).
  // Turning it on probes at once: items may have come while it was off.
  void SetListening(bool listening);
  // A gate on claims and items: before the time `no_work_before(now)`
  // returns (a circuit breaker is open: the handler fails everything), none
  // is handed out; the parts keep their place in the rotation. Probes and
  // lag measurements go on. Read under the scheduler's lock: it must be
  // quick, and must not call back into the scheduler. Set before workers
  // start; call GateChanged() when its answer may have moved earlier.
  void SetGate(std::function<absl::Time(absl::Time now)> no_work_before);
  void GateChanged();
  // Every Next() returns kStop from now on.
  void Shutdown();

  // Workers. Next() blocks until there is a task, or returns kIdle when
  // there is none at `idle_at` (the worker may then close its connection).
  PartTask Next(absl::Time idle_at = absl::InfiniteFuture());
  // After a claim task. `found` says whether the claim returned items (the
  // part stays in the rotation) or not (it goes idle). `turn`: the next
  // claim's PartTask::turn. `claimed`: the part's next batch, read from
  // `next_cursor` already, for the part's next claim task to start on
  // (dropped should the part be revoked first: a claim writes nothing),
  // read at `claimed_at`.
  void FinishClaim(int part, int64_t epoch, bool found, Uuid128 next_cursor,
                   int turn = 0, std::vector<Item> claimed = {},
                   absl::Time claimed_at = absl::InfinitePast());

  // Per-key order with a handler of single items: instead of handling its
  // claim itself, the worker offers the claimed heads here, and they go to
  // workers one at a time (kItem), so the keys of one part run in parallel
  // and a slow item holds up its own key only. A key is given to one worker
  // at a time: a head whose key is with a handler, or finished since
  // `finished` (the claim may have read it before its ack committed), is
  // left for a later claim. Ends the claim task like FinishClaim; the
  // sweep goes on at `next_cursor`. Returns how many items were taken.
  // `claimed_at`: when the claim that read them started.
  size_t Offer(int part, int64_t epoch, uint64_t finished,
               std::vector<Item> items, Uuid128 next_cursor,
               absl::Time claimed_at = absl::InfinitePast());
  // After a kItem task: the item's key is free again (its next item may
  // be due: the part is claimed again). `again`: false when the item could
  // not be settled for a reason that would repeat at once (a broken
  // connection); the part then waits for a probe.
  void FinishItem(int part, int64_t epoch, const Item& item, bool again);
  // FinishItem of several items of one take at once (acks that committed
  // together, GatheredAcks): with `again` false the part rests once.
  void FinishItems(int part, int64_t epoch, const std::vector<Item>& items,
                   bool again);
  // After a probe task: `due` parts have work; `heard` is the task's.
  void FinishProbe(const std::vector<int>& due,
                   absl::Time heard = absl::InfinitePast());
  // A probe failed: idle parts stay idle until the next one.
  void AbandonProbe();
  void FinishLag();
  // True when the worker should stop processing this take's batch: the
  // part was revoked, lost or the member is stopping.
  bool ShouldYield(int part, int64_t epoch) const;
  // Whether the worker on `part` may go on at once with the part's next
  // batch, which came with the ack of this one, instead of handing the part
  // back (FinishClaim with the batch): nothing else waits for a worker (no
  // other part queued, no probe or lag measurement due) and the part is not
  // yielding. The part stays the worker's until it calls FinishClaim.
  bool KeepClaiming(int part, int64_t epoch);

 private:
  static constexpr absl::Duration kExpectMerge = absl::Milliseconds(100);
  // How often the reporter of the group's facts runs them without lag.
  static constexpr absl::Duration kGroupFactsInterval = absl::Seconds(5);
  static constexpr size_t kMaxExpected = 256;

  struct Entry {
    store::ClaimRef ref;
    KeyRange range{};
    Uuid128 cursor = 0;
    int turn = 0;               // PartTask::turn
    std::vector<Item> claimed;  // PartTask::claimed
    absl::Time claimed_at;      // PartTask::claimed_at, of `claimed`
    bool queued = false;        // in run_queue_
    bool revoked = false;
    // Under Offer (per-key order, items one at a time):
    struct Offered {
      Item item;
      absl::Time claimed_at;  // PartTask::claimed_at
    };
    std::deque<Offered> offered;  // claimed heads waiting for a worker
    // Keys (id blocks) offered or with a handler: one worker per key.
    std::set<uint64_t> keys;
    bool offers = false;       // this take's claims are offered
    bool claiming = false;     // a claim task is out
    bool claim_again = false;  // another claim may find more
    // Keys finished so far, and when each recent one did (by that count).
    uint64_t finished = 0;
    std::map<uint64_t, uint64_t> finished_at;
    // Items whose ack broke in a row (FinishItem's `again` false), and
    // until when the part rests for it: not probed, so not claimed.
    int broken = 0;
    absl::Time rest_until = absl::InfinitePast();
    // When the announcement that queued the part's next claim was heard.
    absl::Time heard = absl::InfinitePast();
    // PartTask::predecessor_died_at, until the first pass over the range
    // ends: the sweep wraps (the cursor of a claim handed out goes back
    // past `pass_cursor`, the last one's).
    std::optional<absl::Time> predecessor_died_at;
    std::shared_ptr<DeadCounted> dead_counted;
    Uuid128 pass_cursor = 0;
  };

  bool HasTask() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // HasTask, or an earlier due time was set since `retimed` was read.
  bool HasTaskOrRetimed(uint64_t retimed) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ProbeDue(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a part waits in the run queue for a worker.
  bool Rotating() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool LagDue(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether lag is measured (a lag_interval, and parts to measure), and
  // how often the measuring task (lag, group facts) runs.
  bool MeasuresLag() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration MeasureInterval() const;
  absl::Time NextTimedTask() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration ProbeInterval(absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(int part, Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No worker has it or waits to (under per-key order: no claim is out),
  // and it does not rest after a broken ack.
  bool Idle(int part, const Entry& e, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpectAtLocked(absl::Time due) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Workers on `part` (claims and items), whatever the take.
  int InFlight(int part) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One worker less on `part`.
  void Left(int part) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Listening, and no sign of work for warm_for: the rare poll.
  bool Cold(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a sign of work at `now` (last_work_, warmed_at_).
  void NoteWork(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When idle parts are next polled, as of `now`: the poll interval after
  // the last probe, or after the member turned warm if that came later.
  absl::Time NextPoll(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker is done with a task of `part` under take `epoch` (Left): the
  // part's entry, or null when the part was removed or taken anew since.
  Entry* Returned(int part, int64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the offered items of `e` that no worker has started.
  static void DropOffered(Entry& e);

  const absl::Duration idle_poll_;
  const absl::Duration lag_interval_;
  const absl::Duration idle_poll_listening_;
  const absl::Duration warm_for_;

  mutable absl::Mutex mu_;
  std::map<int, Entry> parts_ ABSL_GUARDED_BY(mu_);
  RangeIndex ranges_ ABSL_GUARDED_BY(mu_);  // parts_' ranges, for WakeParts
  // Workers on each part, whatever the take: kept apart from parts_ so that
  // removing a part and taking it back while a worker still finishes the
  // old take never puts a second worker on the part's keys. Only parts
  // with a worker have an entry.
  std::map<int, int> in_flight_ ABSL_GUARDED_BY(mu_);
  std::deque<int> run_queue_ ABSL_GUARDED_BY(mu_);
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time wake_heard_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool probing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_probe_ ABSL_GUARDED_BY(mu_);
  // Announced due times still ahead of the last probe: at most
  // kMaxExpected, none closer than kExpectMerge to another.
  std::set<absl::Time> expected_ ABSL_GUARDED_BY(mu_);
  // Bumped when ExpectAt sets a new earliest due time: every worker
  // waiting in Next() computes its deadline anew.
  uint64_t retimed_ ABSL_GUARDED_BY(mu_) = 0;
  bool reports_group_ ABSL_GUARDED_BY(mu_) = false;
  bool listening_ ABSL_GUARDED_BY(mu_) = false;
  // The last sign of work; a new member starts cold (Add probes at once).
  absl::Time last_work_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // When a sign of work last turned a cold member warm: the short poll
  // starts an idle_poll after it, not at once. That sign was an
  // announcement of where items are or a claim that found some; a probe
  // of every idle part right then would only take a worker and the
  // connection from them (1.6 ms a probe of a member's 1,024 parts of
  // 4,096; bench/RESULTS.md, session 20). An untargeted NOTIFY (WakeIdle)
  // still probes at once.
  absl::Time warmed_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool measuring_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_lag_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::function<absl::Time(absl::Time)> gate_ ABSL_GUARDED_BY(mu_);
  // No claim or item before this (gate_), as of `now`.
  absl::Time Gated(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return gate_ ? gate_(now) : absl::InfinitePast();
  }
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_PART_SCHEDULER_H_
