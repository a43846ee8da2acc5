#include "store/item_store.h"

#include <algorithm>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "item_ids.h"
#include "status_macros.h"
#include "store/claim_sql.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/interval.h"
#include "store/member_store.h"
#include "store/statements.h"
#include "store/still_due.h"
#include "store/storable_text.h"

namespace sqlgroup::store {
namespace {

// $1 group, $2 session, $3 part, $4 epoch, $5 first key, $6 last key,
// $7 limit. A claim writes nothing: the take is the claim (only its owner
// reads this range), and the statements that settle an item are fenced on
// it. The first column says whether the take still holds, so a claim
// under a dropped take or an expired session fails instead of reading as
// "no items"; the items come along the primary key from the sweep cursor,
// O(limit) whatever the backlog. With `pauses` (schema 17), nothing of a
// paused group or key.
constexpr char kClaim[] = "sqlgroup_claim";
std::string ClaimSql(bool pauses) {
  return absl::StrCat(
      "SELECT t.owned, ", kClaimedColumns, " FROM (SELECT ",
      TakeHeld(2, 3, 4, false),
      " AS owned) t "
      "LEFT JOIN LATERAL (SELECT id, key, payload, attempts, enqueued_at "
      "  FROM sqlgroup.items WHERE t.owned",
      GroupOpen(pauses),
      " AND group_name = $1 "
      "  AND id BETWEEN $5::uuid AND $6::uuid "
      "  AND not_before <= clock_timestamp()",
      KeyOpen(pauses, ""), " ORDER BY id LIMIT $7) i ON true");
}

// $1 group, $2 ids (uuid[]), $3 session, $4 part, $5 epoch.
constexpr char kAck[] = "sqlgroup_ack";
const std::string& AckSql() {
  static const std::string* const kSql =
      new std::string(AckDelete(WithIds(2), 3, 4, 5));
  return *kSql;
}

// The same for one item: $2 its id (uuid).
constexpr char kAckOne[] = "sqlgroup_ack_one";
const std::string& AckOneSql() {
  static const std::string* const kSql =
      new std::string(AckDelete(WithId(2), 3, 4, 5));
  return *kSql;
}

// $1 group, $2 ids (uuid[]), $3 their sessions (uuid[]), $4 their parts
// (int[]), $5 their epochs (bigint[]), $6 their places in the caller's
// list (int[]): the acks of several takes in one statement
// (SharedCommit), each item fenced on its own take as TakeHeld fences one
// (alive by the database clock, held FOR KEY SHARE until the statement
// ends, so a drop or reap of the part waits for it). The fence runs per
// item, for up to kFewAcks items: with a few items a statement (session
// 26's shared statements), checking each distinct take once measured 0.94x
// as fast. Larger statements take AckOfManyTakesSql. Returns the place of
// each row it deleted: one id under two takes (an old epoch and the new) is
// credited to the take that deleted it only.
constexpr char kAckOfTakes[] = "sqlgroup_ack_of_takes";
constexpr char kAckRows[] =
    "unnest($2::uuid[], $3::uuid[], $4::int[], $5::bigint[], $6::int[]) "
    "AS a(id, session_id, part, epoch, place)";
const std::string& AckOfTakesSql() {
  static const std::string* const kSql = new std::string(absl::StrCat(
      "DELETE FROM sqlgroup.items i USING ", kAckRows,
      " WHERE i.group_name = $1 AND i.id = a.id AND ",
      TakeHeldOf("a.session_id", "a.part", "a.epoch", /*hold=*/true),
      " RETURNING a.place"));
  return *kSql;
}

// The same for more than kFewAcks items: each distinct take checked and
// locked once (TakesHeldIn), then the items of the takes held deleted.
// Deleting 160 items of 16 takes it ran in 0.66x the time of the per-item
// fence (64 of 16: 0.85x; 16 of 4: alike; 4 of one: 1.5x, the reason for
// two statements; EXPLAIN ANALYZE medians, session 33).
constexpr size_t kFewAcks = 16;
constexpr char kAckOfManyTakes[] = "sqlgroup_ack_of_many_takes";
const std::string& AckOfManyTakesSql() {
  static const std::string* const kSql = new std::string(absl::StrCat(
      "WITH a AS MATERIALIZED (SELECT * FROM ", kAckRows,
      "), held AS MATERIALIZED (", TakesHeldIn("a"),
      ") DELETE FROM sqlgroup.items i USING a JOIN held h "
      "  ON h.session_id = a.session_id AND h.part = a.part "
      "  AND h.epoch = a.epoch "
      "WHERE i.group_name = $1 AND i.id = a.id RETURNING a.place"));
  return *kSql;
}

// $1..$7 as in the claim, $8 ids (uuid[]). The ack of a batch and the
// claim of the next in one statement (one round trip, not two): the fenced
// delete of the ack, then the claim's columns after the deleted count. The
// claim reads the statement's snapshot, from before the delete, so it must
// start after the acknowledged ids ($5 past the last of them).
constexpr char kAckAndClaim[] = "sqlgroup_ack_and_claim";
std::string AckAndClaimSql(bool pauses) {
  return AckThen(WithIds(8), ClaimSql(pauses));
}

// $1 group, $2 ids (uuid[]), $3 session, $4 part, $5 epoch, $6 error,
// $7 backoff, $8 attempts to add (0 or 1).
constexpr char kRelease[] = "sqlgroup_release";
const std::string& ReleaseSql() {
  static const std::string* const kSql = new std::string(absl::StrCat(
      "UPDATE sqlgroup.items SET attempts = attempts + $8, last_error = $6, "
      "  not_before = clock_timestamp() + $7::interval "
      "WHERE ",
      WithIds(2), " AND ", TakeHeld(3, 4, 5, true)));
  return *kSql;
}

// $1 group, $2 id, $3 session, $4 part, $5 epoch, $6 error, $7 attempts to
// add (1: this delivery failed). Moves the item in one statement, fenced
// like an ack.
constexpr char kDeadLetter[] = "sqlgroup_dead_letter";
const std::string& DeadLetterSql() {
  static const std::string* const kSql = new std::string(absl::StrCat(
      "WITH dead AS (DELETE FROM sqlgroup.items WHERE group_name = $1 "
      "  AND id = $2::uuid AND ",
      TakeHeld(3, 4, 5, true),
      "  RETURNING group_name, id, key, payload, enqueued_at, "
      "  attempts + $7::integer AS attempts) "
      "INSERT INTO sqlgroup.dead_items (group_name, id, key, payload, "
      "  enqueued_at, attempts, last_error) "
      "SELECT group_name, id, key, payload, enqueued_at, attempts, $6 "
      "FROM dead "
      "ON CONFLICT (group_name, id) DO UPDATE SET key = EXCLUDED.key, "
      "  payload = EXCLUDED.payload, enqueued_at = EXCLUDED.enqueued_at, "
      "  attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error, "
      "  died_at = clock_timestamp()"));
  return *kSql;
}

// $1 group, $2 parts (int[]), $3 first keys (uuid[]), $4 last keys.
constexpr char kProbe[] = "sqlgroup_probe";
// Per part: whether an item is due and, only when none is, the soonest of
// the first waiting ones (both along the primary key from the range start):
// a part with a backlog of due items costs one row.
std::string ProbeSql(bool pauses) {
  return absl::StrCat(
      "SELECT b.part, d.due, ", MicrosOf("w.soonest - clock_timestamp()"),
      " FROM unnest($2::int[], $3::uuid[], $4::uuid[]) AS b(part, lo, hi) "
      "CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM sqlgroup.items i "
      "  WHERE i.group_name = $1 AND i.id BETWEEN b.lo AND b.hi "
      "  AND i.not_before <= clock_timestamp()",
      GroupOpen(pauses), KeyOpen(pauses, "i."),
      ") AS due) d "
      "CROSS JOIN LATERAL (SELECT CASE WHEN d.due THEN NULL ELSE ("
      "  SELECT min(x.not_before) FROM (SELECT i.not_before "
      "    FROM sqlgroup.items i WHERE i.group_name = $1",
      GroupOpen(pauses), KeyOpen(pauses, "i."),
      "    AND i.id BETWEEN b.lo AND b.hi "
      "    ORDER BY i.id LIMIT ",
      kProbeLookahead,
      ") x WHERE x.not_before > '-infinity' "
      "  AND x.not_before < 'infinity'",
      // A paused item past its due time would read as due at once, and
      // the member would probe again at once.
      pauses ? " AND x.not_before > clock_timestamp()" : "",
      ") END AS soonest) w "
      "WHERE d.due OR w.soonest IS NOT NULL");
}

// $1 group, $2 parts, $3 first keys, $4 last keys, $5 cap. Per part: how
// many of its first `cap` keys exist and the oldest of them.
constexpr char kLag[] = "sqlgroup_lag";
constexpr char kLagSql[] =
    "SELECT b.part, c.n, "
    "  coalesce((extract(epoch from clock_timestamp() - c.oldest) "
    "    * 1000000)::bigint, 0) "
    "FROM unnest($2::int[], $3::uuid[], $4::uuid[]) AS b(part, lo, hi) "
    "CROSS JOIN LATERAL (SELECT count(*) AS n, "
    "  min(s.enqueued_at) AS oldest FROM (SELECT i.enqueued_at "
    "  FROM sqlgroup.items i WHERE i.group_name = $1 "
    "  AND i.id BETWEEN b.lo AND b.hi ORDER BY i.id LIMIT $5) s) c";

// $1 group, $2 percent of the table's pages. The group's items on a
// random sample of pages, counted by the top 24 bits of their key. Key
// density says nothing once ids are laid out by time (a burst of enqueues
// is dense, a quiet hour sparse); the heap's pages are an even sample
// whatever the ids.
constexpr char kLagSample[] = "sqlgroup_lag_sample";
constexpr char kLagSampleSql[] =
    "SELECT ('x' || substr(id::text, 1, 6))::bit(24)::int, count(*) "
    "FROM sqlgroup.items TABLESAMPLE SYSTEM ($2::real) "
    "WHERE group_name = $1 GROUP BY 1";
// Pages read by one sample: ~8 MB, whatever the table's size.
constexpr double kLagSamplePages = 1000;

// $1 group, $2 limit. The group's oldest waiting items, in time order from
// items_waiting_since: a bounded read that finds the oldest item of every
// part whose backlog reaches back that far.
constexpr char kOldestWaiting[] = "sqlgroup_oldest_waiting";
constexpr char kOldestWaitingSql[] =
    "SELECT id::text, (extract(epoch from clock_timestamp() - enqueued_at) "
    "  * 1000000)::bigint FROM sqlgroup.items WHERE group_name = $1 "
    "ORDER BY enqueued_at LIMIT $2";

// Announces items due now through sqlgroup.announce_items (schema 12), as
// the SQL enqueue functions do: it decides what to send (their ids'
// prefixes for the transaction's first few announcements, the plain one
// after, or when they name too many), counting in a transaction-local
// setting that the two kinds of producer share. One id per prefix is all
// it needs, and one prefix past the most it names tells it to send plainly.
void AnnounceItems(pqxx::work& tx, const std::string& group,
                   const std::vector<std::string>& ids) {
  std::map<std::string, std::string> one_per_prefix;
  for (const std::string& id : ids) {
    if (one_per_prefix.size() > kMaxAnnouncedPrefixes) break;
    one_per_prefix.emplace(id.substr(0, 4), id);
  }
  std::vector<std::string> sample;
  for (const auto& [prefix, id] : one_per_prefix) sample.push_back(id);
  tx.exec_params("SELECT sqlgroup.announce_items($1, interval '0', $2::uuid[])",
                 group, SqlArray(sample));
}

}  // namespace

void PrepareItemStatements(pqxx::connection& conn, bool pauses) {
  // Through a pooler in transaction mode a session setting would reach
  // other clients of the same server connection, and this one's next
  // transaction may run on another: nothing is set.
  if (!Pooled(conn)) {
    // No JIT: the generic plans' estimates grow with the table, and past
    // jit_above_cost (a backlog of about 2 million items) PostgreSQL
    // compiled each claim of 64 items afresh, about 50 ms of CPU, for a
    // statement that runs in 0.5: a member then handled 2,200 items/s
    // instead of 14,000 (bench/RESULTS.md, session 17).
    // No sequential or bitmap scans: every statement here walks the
    // primary key, but a queue that churns looks nearly empty to the
    // planner (its vacuum saw a few live rows; the entries of the thousands
    // deleted since are not counted), and a plan kept from such statistics
    // read the whole table, or every entry of the group in
    // items_waiting_since, on each ack: 0.8 ms an ack instead of 0.06
    // under 1,500 items/s (bench/RESULTS.md, session 18).
    for (const char* setting :
         {"SET plan_cache_mode = force_generic_plan", "SET jit = off",
          "SET enable_seqscan = off", "SET enable_bitmapscan = off"}) {
      try {
        pqxx::nontransaction(conn).exec(setting);
      } catch (const pqxx::sql_error& e) {
        // 42704 (or 0A000, unsupported): a server without the setting
        // (plan_cache_mode before PostgreSQL 12, jit before 11, CockroachDB)
        // plans and runs as it always does.
        if (e.sqlstate() != "42704" && e.sqlstate() != "0A000") throw;
      }
    }
  }
  Prepare(conn, kClaim, ClaimSql(pauses));
  Prepare(conn, kAck, AckSql());
  Prepare(conn, kAckOne, AckOneSql());
  Prepare(conn, kAckAndClaim, AckAndClaimSql(pauses));
  Prepare(conn, kAckOfTakes, AckOfTakesSql());
  Prepare(conn, kAckOfManyTakes, AckOfManyTakesSql());
  Prepare(conn, kRelease, ReleaseSql());
  Prepare(conn, kDeadLetter, DeadLetterSql());
  Prepare(conn, kProbe, ProbeSql(pauses));
  Prepare(conn, kLag, kLagSql);
  Prepare(conn, kLagSample, kLagSampleSql);
  Prepare(conn, kOldestWaiting, kOldestWaitingSql);
  PrepareKeyedStatements(conn, pauses);
  PrepareStillDue(conn, pauses);
}

absl::StatusOr<std::vector<Item>> ClaimItems(pqxx::connection& conn,
                                             const ClaimRef& ref, Uuid128 from,
                                             Uuid128 last, int limit) {
  return GuardOr<std::vector<Item>>(
      "claim items", [&]() -> absl::StatusOr<std::vector<Item>> {
        pqxx::nontransaction tx(conn);
        const pqxx::result r =
            ExecPrepared(tx, kClaim, ref.group, ref.session, ref.part,
                         ref.epoch, FormatUuid(from), FormatUuid(last), limit);
        return ClaimedItems(r, 0, ref);
      });
}

AckedAndClaimed AckAndClaim(pqxx::connection& conn, const ClaimRef& ref,
                            const std::vector<std::string>& ids, Uuid128 from,
                            Uuid128 last, int limit) {
  pqxx::nontransaction tx(conn);
  const pqxx::result r = ExecPrepared(
      tx, kAckAndClaim, ref.group, ref.session, ref.part, ref.epoch,
      FormatUuid(from), FormatUuid(last), limit, KeyOrderedIds(ids));
  return {r.empty() ? 0 : r[0][0].as<int64_t>(), ClaimedItems(r, 1, ref)};
}

int64_t DeleteClaimed(pqxx::transaction_base& tx, const ClaimRef& ref,
                      const std::vector<std::string>& ids) {
  const pqxx::result r =
      ids.size() == 1 ? ExecPrepared(tx, kAckOne, ref.group, ids.front(),
                                     ref.session, ref.part, ref.epoch)
                      : ExecPrepared(tx, kAck, ref.group, KeyOrderedIds(ids),
                                     ref.session, ref.part, ref.epoch);
  return static_cast<int64_t>(r.affected_rows());
}

std::vector<bool> DeleteOfTakes(pqxx::connection& conn,
                                const std::string& group,
                                const std::vector<TakeItem>& items) {
  // In the order of their parts, epochs and ids: the takes' rows are then
  // locked in the order a drop of several parts locks them (no deadlock),
  // and the items' rows in key order, as KeyOrderedIds does for one take.
  std::vector<int> order(items.size());
  for (size_t i = 0; i < items.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::tie(items[a].part, items[a].epoch, items[a].id) <
           std::tie(items[b].part, items[b].epoch, items[b].id);
  });
  std::vector<std::string> ids, sessions;
  std::vector<int> parts;
  std::vector<int64_t> epochs;
  for (int i : order) {
    ids.push_back(items[i].id);
    sessions.push_back(items[i].session);
    parts.push_back(items[i].part);
    epochs.push_back(items[i].epoch);
  }
  pqxx::nontransaction tx(conn);
  const pqxx::result r =
      ExecPrepared(tx, items.size() > kFewAcks ? kAckOfManyTakes : kAckOfTakes,
                   group, SqlArray(ids), SqlArray(sessions), SqlArray(parts),
                   SqlArray(epochs), SqlArray(order));
  std::vector<bool> deleted(items.size(), false);
  for (const auto& row : r) {
    const int place = row[0].as<int>();
    if (place >= 0 && place < static_cast<int>(items.size())) {
      deleted[place] = true;
    }
  }
  return deleted;
}

int64_t DeleteClaimedNow(pqxx::connection& conn, const ClaimRef& ref,
                         const std::vector<std::string>& ids) {
  pqxx::nontransaction tx(conn);
  return DeleteClaimed(tx, ref, ids);
}

absl::StatusOr<int64_t> ReleaseForRetry(pqxx::connection& conn,
                                        const ClaimRef& ref,
                                        const std::vector<std::string>& ids,
                                        const std::string& error,
                                        absl::Duration backoff,
                                        bool count_attempt) {
  return GuardOr<int64_t>("release items for retry", [&] {
    // One autocommitted statement: one round trip, not BEGIN and COMMIT too.
    pqxx::nontransaction tx(conn);
    return static_cast<int64_t>(
        ExecPrepared(tx, kRelease, ref.group, KeyOrderedIds(ids), ref.session,
                     ref.part, ref.epoch, StorableText(error),
                     ToInterval(backoff), count_attempt ? 1 : 0)
            .affected_rows());
  });
}

absl::StatusOr<std::map<std::string, int>> CountDeliveriesOfTheDead(
    pqxx::connection& conn, const ClaimRef& ref,
    const std::vector<std::string>& ids, absl::Time died_at) {
  using Counted = std::map<std::string, int>;
  return GuardOr<Counted>("count the deliveries of a dead member", [&] {
    pqxx::nontransaction tx(conn);
    Counted counted;
    // $1 group, $2 ids (uuid[], key order), $3 session, $4 part, $5 epoch,
    // $6 when the previous owner died (Unix microseconds). Rare (a take
    // after a crash): not prepared.
    for (const pqxx::row& row : tx.exec_params(
             absl::StrCat(
                 "UPDATE sqlgroup.items SET attempts = attempts + 1, "
                 "last_error = 'a delivery ended without an outcome: the "
                 "member running it stopped (crashed, was killed or lost its "
                 "session)' WHERE ",
                 WithIds(2),
                 " AND not_before <= to_timestamp($6::float8 / 1e6) AND "
                 "enqueued_at <= to_timestamp($6::float8 / 1e6) AND ",
                 TakeHeld(3, 4, 5, false), " RETURNING id::text, attempts"),
             ref.group, KeyOrderedIds(ids), ref.session, ref.part, ref.epoch,
             absl::ToUnixMicros(died_at))) {
      counted[row[0].as<std::string>()] = row[1].as<int>();
    }
    return counted;
  });
}

absl::StatusOr<bool> DeadLetter(pqxx::connection& conn, const ClaimRef& ref,
                                const std::string& id, const std::string& error,
                                bool count_attempt) {
  return GuardOr<bool>("dead-letter item", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    const bool moved =
        ExecPrepared(tx, kDeadLetter, ref.group, id, ref.session, ref.part,
                     ref.epoch, StorableText(error), count_attempt ? 1 : 0)
            .affected_rows() == 1;
    tx.commit();
    return moved;
  });
}

absl::StatusOr<ProbeResult> ProbeParts(pqxx::connection& conn,
                                       const std::string& group,
                                       const std::vector<int>& parts,
                                       const std::vector<KeyRange>& ranges) {
  return GuardOr<ProbeResult>("look for due items", [&] {
    const Ranges r = RangeArrays(ranges);
    pqxx::nontransaction tx(conn);
    return ProbeResultOf(
        ExecPrepared(tx, kProbe, group, SqlArray(parts), r.firsts, r.lasts));
  });
}

absl::StatusOr<std::vector<PartLagRow>> MeasureLag(
    pqxx::connection& conn, const std::string& group,
    const std::vector<int>& parts, const std::vector<KeyRange>& ranges,
    int cap) {
  return GuardOr<std::vector<PartLagRow>>("measure lag", [&] {
    const Ranges arrays = RangeArrays(ranges);
    std::map<int, KeyRange> by_part;
    for (size_t i = 0; i < parts.size(); ++i) by_part[parts[i]] = ranges[i];
    // A bounded read, but never one that holds back vacuum for long.
    pqxx::work tx(conn);
    LocalLimits(tx);
    tx.exec("SET LOCAL statement_timeout = 5000");
    std::vector<PartLagRow> rows;
    std::map<Uuid128, int> big;  // first key -> part, for parts at the cap
    for (const pqxx::row& row :
         ExecPrepared(tx, kLag, group, SqlArray(parts), arrays.firsts,
                      arrays.lasts, cap)) {
      PartLagRow lag;
      lag.part = row[0].as<int>();
      lag.items = row[1].as<int64_t>();
      lag.oldest = absl::Microseconds(row[2].as<int64_t>());
      if (lag.items >= cap) big[by_part[lag.part].first] = lag.part;
      rows.push_back(lag);
    }
    if (big.empty()) {
      tx.commit();
      return rows;
    }
    // The part at the cap whose range holds `key`, if any: the first key of
    // `big` at or below it names the only candidate.
    auto big_part_of = [&](Uuid128 key) -> std::optional<int> {
      auto it = big.upper_bound(key);
      if (it == big.begin()) return std::nullopt;
      --it;
      if (key > by_part[it->second].last) return std::nullopt;
      return it->second;
    };
    // Their counts: scale a sample of the table's pages (all of them, so
    // an exact count, when the table is small).
    const double pages = tx.exec1(
                               "SELECT greatest(1, pg_relation_size("
                               "'sqlgroup.items') / current_setting("
                               "'block_size')::int)")[0]
                             .as<double>();
    const double percent = std::min(100.0, 100.0 * kLagSamplePages / pages);
    std::map<int, double> sampled;
    for (const pqxx::row& row : ExecPrepared(tx, kLagSample, group, percent)) {
      const auto part = big_part_of(Uuid128(row[0].as<int64_t>()) << 104);
      if (part) sampled[*part] += row[1].as<double>();
    }
    // Their oldest items, from the group's oldest waiting ones.
    std::map<int, absl::Duration> oldest;
    for (const pqxx::row& row :
         ExecPrepared(tx, kOldestWaiting, group, 10 * cap)) {
      const auto part = big_part_of(*ParseUuid(row[0].as<std::string>()));
      if (part) {
        oldest.emplace(*part, absl::Microseconds(row[1].as<int64_t>()));
      }
    }
    for (PartLagRow& lag : rows) {
      if (lag.items < cap) continue;
      lag.items = static_cast<int64_t>(
          std::max<double>(cap, sampled[lag.part] * 100.0 / percent));
      auto it = oldest.find(lag.part);
      if (it != oldest.end()) lag.oldest = std::max(lag.oldest, it->second);
    }
    tx.commit();
    return rows;
  });
}

absl::StatusOr<std::vector<std::string>> InsertItems(
    pqxx::work& tx, const std::string& group, int parts,
    const std::vector<NewItem>& items, bool notify, size_t max_payload,
    const EnqueueKey* key, bool* repeated) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].payload.size() > max_payload) {
      return absl::InvalidArgumentError(absl::StrCat(
          "item ", i, " has a payload of ", items[i].payload.size(),
          " bytes, more than the limit of ", max_payload,
          " (ProducerOptions::max_payload_bytes); nothing was enqueued"));
    }
  }
  static thread_local ItemIdGenerator id_generator;
  std::vector<const std::string*> keys;
  keys.reserve(items.size());
  for (const NewItem& item : items) {
    keys.push_back(item.key ? &*item.key : nullptr);
  }
  const std::vector<Uuid128> new_ids = id_generator.Next(
      parts, keys, static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())));
  std::vector<std::string> ids;
  ids.reserve(items.size());
  for (const Uuid128& id : new_ids) ids.push_back(FormatUuid(id));
  if (repeated) *repeated = false;
  if (key != nullptr) {
    // The key first: a repeat inserts nothing and answers with the first
    // enqueue's ids, read in a statement of its own (a fresh snapshot, so
    // it sees a concurrent first enqueue that committed while this one
    // waited for the key).
    std::optional<std::vector<std::string>> first;
    RETURN_IF_ERROR(Guard("claim the enqueue's idempotency key", [&] {
      const std::string id_array =
          absl::StrCat("{", absl::StrJoin(ids, ","), "}");
      const bool claimed =
          key->fingerprint.empty()
              ? tx.exec_params1(
                      "SELECT sqlgroup.claim_enqueue_key($1, $2, $3::uuid[], "
                      "nullif($4, ''))",
                      group, key->key, id_array, key->previous)[0]
                    .as<bool>()
              : tx.exec_params1(
                      "SELECT sqlgroup.claim_enqueue_key($1, $2, $3::uuid[], "
                      "nullif($4, ''), $5)",
                      group, key->key, id_array, key->previous,
                      pqxx::binarystring(key->fingerprint))[0]
                    .as<bool>();
      if (claimed) return;
      const pqxx::result r = tx.exec_params(
          "SELECT unnest(ids)::text FROM sqlgroup.enqueue_keys "
          "WHERE group_name = $1 AND idempotency_key = $2",
          group, key->key);
      first.emplace();
      for (const auto& row : r) first->push_back(row[0].as<std::string>());
    }));
    if (first) {
      if (repeated) *repeated = true;
      return *first;
    }
  }
  absl::Status s = Guard("enqueue items", [&] {
    // Multi-row VALUES with quoted literals: one round trip per chunk, and
    // bytea payloads need no array encoding.
    constexpr size_t kChunk = 500;
    const std::string quoted_group = tx.quote(group);
    for (size_t start = 0; start < items.size(); start += kChunk) {
      std::string sql =
          "INSERT INTO sqlgroup.items (group_name, id, key, payload, "
          "not_before) VALUES ";
      const size_t end = std::min(items.size(), start + kChunk);
      for (size_t i = start; i < end; ++i) {
        const NewItem& item = items[i];
        absl::StrAppend(
            &sql, i == start ? "" : ",", "(", quoted_group, ",'", ids[i],
            "'::uuid,", item.key ? tx.quote(*item.key) : "NULL", ",",
            tx.quote_raw(item.payload), ",",
            item.delay > absl::ZeroDuration()
                ? absl::StrCat("clock_timestamp() + '", ToInterval(item.delay),
                               "'::interval")
                : "'-infinity'",
            ")");
      }
      tx.exec(sql);
    }
    if (notify) {
      // One NOTIFY for the items due now, one for the soonest delayed one:
      // idle members then probe exactly when something falls due.
      std::vector<std::string> due_now;
      absl::Duration soonest = absl::InfiniteDuration();
      for (size_t i = 0; i < items.size(); ++i) {
        if (items[i].delay > absl::ZeroDuration()) {
          soonest = std::min(soonest, items[i].delay);
        } else {
          due_now.push_back(ids[i]);
        }
      }
      if (!due_now.empty()) AnnounceItems(tx, group, due_now);
      if (soonest != absl::InfiniteDuration()) {
        Notify(tx, ItemsDueIn(group, soonest));
      }
    }
  });
  if (!s.ok()) return s;
  return ids;
}

}  // namespace sqlgroup::store
