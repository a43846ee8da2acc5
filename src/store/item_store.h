// The hot path: claiming items inside a part's key range, the fenced
// acknowledgement, release with backoff, dead-lettering, and enqueueing.
// The claim-side statements are prepared once per connection
// (PrepareItemStatements) and named by constants here.
#ifndef SQLGROUP_STORE_ITEM_STORE_H_
#define SQLGROUP_STORE_ITEM_STORE_H_

#include <cstdint>
#include <map>
#include <pqxx/connection>
#include <pqxx/transaction>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "keyspace.h"
#include "sqlgroup/item.h"
#include "sqlgroup/producer.h"
#include "store/item_acks.h"
#include "store/model.h"

namespace sqlgroup::store {

// Call once on each worker connection, before the functions below. Also
// makes the connection run every prepared statement's generic plan
// (plan_cache_mode), planned once: left to choose, PostgreSQL planned the
// fenced ack afresh on every execution (session 6), and each claim of a
// large table too (session 8), which cost more server CPU than running
// them (claim_fence_test checks these plans read items by index). A
// handler's own prepared statements on this connection get generic plans
// too. And turns JIT compilation off (jit): short statements never repay
// it, and with a large backlog PostgreSQL compiled every claim. And turns
// sequential and bitmap scans off: the statements walk the primary key,
// and the statistics of a queue that churns (nearly empty) made plans that
// read the whole table on every ack. Ignored by a server that has no such
// setting. With `pauses` (the schema is internal::kPausesFrom or newer)
// the claims and probes enforce pauses and wait for requeued heads; an
// older schema has neither table nor column, and the statements as before.
void PrepareItemStatements(pqxx::connection& conn, bool pauses);

// Reads up to `limit` due items with keys in [from, last], in key order,
// for the take `ref`. Writes nothing: the take is the claim, since only
// its owner reads this range. ABORTED when the take no longer exists or
// its session has expired.
absl::StatusOr<std::vector<Item>> ClaimItems(pqxx::connection& conn,
                                             const ClaimRef& ref, Uuid128 from,
                                             Uuid128 last, int limit);

// The fence: deletes the items if and only if the take `ref` still owns
// their part and its session is alive, holding the take against a drop or
// a reap until the transaction ends. Runs inside the acknowledging
// transaction; returns how many rows it deleted (the caller commits only
// if all were).
int64_t DeleteClaimed(pqxx::transaction_base& tx, const ClaimRef& ref,
                      const std::vector<std::string>& ids);

// The same fenced delete as one autocommit statement, for a handler that
// wrote nothing: one round trip instead of three (BEGIN, DELETE, COMMIT).
// Each item deleted is acknowledged for good, even if others of `ids` were
// not (another take acknowledged them first). Throws pqxx exceptions like
// DeleteClaimed; a broken connection leaves the outcome unknown (the item
// is read again if it is still there).
int64_t DeleteClaimedNow(pqxx::connection& conn, const ClaimRef& ref,
                         const std::vector<std::string>& ids);

// DeleteClaimedNow of items under several takes of group `group`, each
// item fenced on its own take, in one autocommit statement: whether it
// deleted each of `items` (by place, so one id under two takes counts for
// the live one only). Throws as DeleteClaimedNow does.
std::vector<bool> DeleteOfTakes(pqxx::connection& conn,
                                const std::string& group,
                                const std::vector<TakeItem>& items);

// DeleteClaimedNow and then ClaimItems(from, last, limit) in one statement
// (one round trip): `from` must lie past every id in `ids`, since the claim
// reads from before the delete. Throws as DeleteClaimedNow does; `acked`
// counts as its result does (AckedAndClaimed: store/item_acks.h).
AckedAndClaimed AckAndClaim(pqxx::connection& conn, const ClaimRef& ref,
                            const std::vector<std::string>& ids, Uuid128 from,
                            Uuid128 last, int limit);

// Puts items back in one statement, not due before now + backoff, with
// attempts + 1 when `count_attempt`, fenced like an ack. Returns how many
// were updated (none when the take is gone). `error` may be any bytes:
// those that are not storable text (not UTF-8, NUL) are stored as '?'.
absl::StatusOr<int64_t> ReleaseForRetry(pqxx::connection& conn,
                                        const ClaimRef& ref,
                                        const std::vector<std::string>& ids,
                                        const std::string& error,
                                        absl::Duration backoff,
                                        bool count_attempt);

// Counts an attempt for each of `ids` that was due when the part's
// previous owner died (`died_at`, database clock; see Owner): the first
// items a take hands out after an unclean predecessor may have been with
// its handler when it died, a delivery that ended without an outcome.
// Fenced like an ack; returns each counted item's attempts now (ids not
// returned were not counted: not due then, or the take is gone).
absl::StatusOr<std::map<std::string, int>> CountDeliveriesOfTheDead(
    pqxx::connection& conn, const ClaimRef& ref,
    const std::vector<std::string>& ids, absl::Time died_at);

// Moves an item to dead_items with its last error (any bytes, stored as
// ReleaseForRetry does), in one statement fenced like an ack, its attempts
// counting this delivery's failure (`count_attempt`) or not (counted
// already). False when the take is gone (or the item was acknowledged
// already).
absl::StatusOr<bool> DeadLetter(pqxx::connection& conn, const ClaimRef& ref,
                                const std::string& id, const std::string& error,
                                bool count_attempt = true);

struct ProbeResult {
  std::vector<int> due;  // parts with items due now
  // Until the soonest item that is not due yet falls due (among
  // the first kProbeLookahead waiting in each part's range, by key);
  // infinite when there is none.
  absl::Duration soonest = absl::InfiniteDuration();
};
inline constexpr int kProbeLookahead = 100;

// Which of `parts` (with their ranges) have due items, and when
// the next waiting ones fall due (retries another owner scheduled before a
// part moved, delayed items nobody announced): one query for all of a
// member's idle parts.
absl::StatusOr<ProbeResult> ProbeParts(pqxx::connection& conn,
                                       const std::string& group,
                                       const std::vector<int>& parts,
                                       const std::vector<KeyRange>& ranges);

// Per-key order (groups.ordering = 'key'; keyed_claims.cc). The items of a
// key share one block of ids (key_placement.h), so the first item of a
// block is its key's head: only heads are handed out, and a head that is
// not due (in backoff, delayed) holds back its own key and no other.
struct HeadClaim {
  std::vector<Item> items;  // key order
  // Where the next claim of the sweep starts: the block after the last one
  // this claim handed out (or, with none, walked past).
  Uuid128 resume = 0;
  // The walk reached the end of the range (resume is then meaningless:
  // the sweep wraps to the range's start).
  bool exhausted = false;
};

// The claim of a handler of single items under per-key order: walks from
// `from` over the heads of the keys in [from, last], one index probe per
// key, until it found `limit` due heads (a run of unkeyed items counts as
// one) or walked `max_blocks` keys, and returns the due heads, one item
// per key (a run of unkeyed items whole). Keys of `pass_over` (blocks: keys
// with a handler already) are stepped over like keys whose head is not
// due. Writes nothing. ABORTED as ClaimItems.
absl::StatusOr<HeadClaim> ClaimHeads(pqxx::connection& conn,
                                     const ClaimRef& ref, Uuid128 from,
                                     Uuid128 last, int limit, int max_blocks,
                                     const std::vector<uint64_t>& pass_over);

// The batch handler's claim under per-key order: reads up to `limit` items
// along [from, last] in key order, as ClaimItems does, and returns of each
// key the items that are due up to its first one that is not (or none,
// when an older item of the key, before `from`, is still waiting), so a
// key's items reach the handler in order, several in one batch. Keys of
// `pass_over` are held back whole. `continued`: `from` is right after
// items of its key this member acknowledged (none of its key's older items
// is left), so that is not looked up. `resume` is the block after the key
// of the last item read. Writes nothing. ABORTED as ClaimItems.
absl::StatusOr<HeadClaim> ClaimRuns(pqxx::connection& conn, const ClaimRef& ref,
                                    Uuid128 from, Uuid128 last, int limit,
                                    const std::vector<uint64_t>& pass_over,
                                    bool continued);

// DeleteClaimedNow of `ids` and then ClaimRuns in one statement (one round
// trip): a batch handler's ack carries its part's next claim. `from` must
// be past the acknowledged ids (the claim reads the snapshot from before
// the delete), and `continued` set when it is right after them within
// their key. Throws as DeleteClaimedNow does.
AckedAndClaimed AckAndClaimRuns(pqxx::connection& conn, const ClaimRef& ref,
                                const std::vector<std::string>& ids,
                                Uuid128 from, Uuid128 last, int limit,
                                const std::vector<uint64_t>& pass_over,
                                bool continued);

// The item of its key that follows `settled` (an item of a key just
// acknowledged or dead-lettered), if it is due: a handler of single items
// may go on with the key at once instead of waiting for the next claim's
// turn. Empty when the key has no next item or it is not due. ABORTED as
// ClaimItems.
absl::StatusOr<std::vector<Item>> NextOfKey(pqxx::connection& conn,
                                            const ClaimRef& ref,
                                            const std::string& settled);
// DeleteClaimedNow of the one item `id` and then NextOfKey(id) in one
// statement (one round trip). Throws as DeleteClaimedNow does.
AckedAndClaimed AckAndNextOfKey(pqxx::connection& conn, const ClaimRef& ref,
                                const std::string& id);
// The same inside the acknowledging transaction `tx` (a handler that wrote
// in it): the ack's statement reads the key's next item too, one round
// trip fewer than a NextOfKey after the commit. The caller may use the
// item only once `tx` committed.
AckedAndClaimed AckAndNextOfKey(pqxx::transaction_base& tx, const ClaimRef& ref,
                                const std::string& id);

// ProbeParts under per-key order: a part is due when one of its keys' heads
// is, found within `max_blocks` keys from its range's start (or when the
// walk stopped there: a claim then walks on); `soonest` is when the first
// of the heads it passed falls due.
absl::StatusOr<ProbeResult> ProbeHeads(pqxx::connection& conn,
                                       const std::string& group,
                                       const std::vector<int>& parts,
                                       const std::vector<KeyRange>& ranges,
                                       int max_blocks);

struct PartLagRow {
  int part = 0;
  int64_t items = 0;  // exact below `cap`, estimated above
  // Age of the oldest item not yet acknowledged; 0 if none. Exact below
  // `cap`; above, exact when the part's oldest is among the group's
  // 10 x cap oldest waiting items, else a lower bound.
  absl::Duration oldest;
};

// Lag of each of `parts`: counts at most `cap` keys per part (the rest is
// estimated from how much of the key range those keys span, exact in
// expectation for random keys) and reads at most 10 x cap of the group's
// oldest waiting items, so the cost is O((parts + 10) x cap) at any
// backlog.
absl::StatusOr<std::vector<PartLagRow>> MeasureLag(
    pqxx::connection& conn, const std::string& group,
    const std::vector<int>& parts, const std::vector<KeyRange>& ranges,
    int cap);

struct PartBlockedRow {
  int part = 0;
  // Keys whose head waits for a retry: it failed (attempts > 0) and is not
  // due yet, so the key's later items wait behind it. Exact below `cap`;
  // above, a lower bound.
  int64_t keys = 0;
  // Age (since enqueue) of the oldest of those heads; 0 if none. Exact
  // below `cap`; above, the oldest among those counted.
  absl::Duration oldest;
};

// Keys blocked behind a retry in each of `parts`, under per-key order
// (keyed_claims.cc): one statement for all parts that reads at most `cap`
// entries of the index items_retrying per part (the part's keyed items
// that failed at least once, in key order), each with its row and one
// probe of the primary key (is it its key's head?), so the cost is
// O(parts x cap) at any backlog.
absl::StatusOr<std::vector<PartBlockedRow>> MeasureBlocked(
    pqxx::connection& conn, const std::string& group,
    const std::vector<int>& parts, const std::vector<KeyRange>& ranges,
    int cap);

// The same count, exact (no cap), in `tx`, for an operator's look (group
// describe): reads every keyed item of the parts that failed at least once.
// Needs no prepared statement; throws pqxx exceptions.
std::vector<PartBlockedRow> CountBlocked(pqxx::transaction_base& tx,
                                         const std::string& group,
                                         const std::vector<int>& parts,
                                         const std::vector<KeyRange>& ranges);

// An enqueue's idempotency key (schema 10), and the key of the producer's
// previous batch, whose row the enqueue deletes (empty: none).
struct EnqueueKey {
  std::string key;
  std::string previous;
  // The items' EnqueueFingerprint (schema 16 and later; empty before):
  // a key claimed before for other items fails with INVALID_ARGUMENT.
  std::string fingerprint;
};

// Enqueues `items` in `tx` with fresh ids spread over the group's `parts`
// parts and in enqueue order within each (item_ids.h); returns the ids.
// INVALID_ARGUMENT for an oversized payload (nothing is written). With
// `key`: claims it for the new ids first; if an enqueue with that key
// committed before, inserts nothing and returns that enqueue's ids (and
// sets *repeated). A concurrent enqueue with the key makes it wait for
// that one's end.
absl::StatusOr<std::vector<std::string>> InsertItems(
    pqxx::work& tx, const std::string& group, int parts,
    const std::vector<NewItem>& items, bool notify, size_t max_payload,
    const EnqueueKey* key = nullptr, bool* repeated = nullptr);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_ITEM_STORE_H_
