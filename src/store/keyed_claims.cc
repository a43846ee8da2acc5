// Claims and probes under per-key order (groups.ordering = 'key'): a walk
// over the heads of the keys in a part's range. All items of a key share
// one 64-bit block of ids (key_placement.h), in enqueue order, so a key's
// head is the first item of its block; the walk visits one item per block
// with one index probe each and never reads behind a head. A head that is
// not due (in backoff after a failure, or delayed) blocks its key, and
// only its key: the walk steps over the whole block. Unkeyed items each
// have a block of their own, so they are never held back. Also the count
// of keys blocked behind a retry, for the metrics and `group describe`.
#include <algorithm>
#include <limits>
#include <optional>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "key_placement.h"
#include "store/claim_sql.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/interval.h"
#include "store/item_store.h"
#include "store/member_store.h"
#include "store/statements.h"

namespace sqlgroup::store {
namespace {

// The first and the last id of the block of the uuid expression `id`: its
// top 64 bits are the first 16 hex digits of the text form (18 characters
// with the two dashes).
std::string BlockFirstSql(const std::string& id) {
  return absl::StrCat("(left(", id,
                      "::text, 18) || '-0000-000000000000')::uuid");
}
std::string BlockLastSql(const std::string& id) {
  return absl::StrCat("(left(", id,
                      "::text, 18) || '-ffff-ffffffffffff')::uuid");
}

// Whether the item `i` heads its key: due, and no older item of its block
// exists, even below the range's start (a walk that starts mid-block, at
// a cursor after an acknowledged head, needs this check; later steps start
// at a block's first id).
std::string FirstHeadDue(const std::string& cursor_group) {
  return absl::StrCat(
      "i.not_before <= clock_timestamp() AND NOT EXISTS (SELECT 1 FROM "
      "sqlgroup.items e WHERE e.group_name = ",
      cursor_group, " AND e.id >= ", BlockFirstSql("i.id"),
      " AND e.id < i.id)");
}

// The walk's step from the row `x` (id, unkeyed) it found: for a keyed row,
// the end of its key's block; for an unkeyed one, the run of unkeyed rows
// that starts there (up to $7 of them: one step, one range read, as the
// sweep reads them), its end and how many of it are due. Its parameters
// are the claim's.
std::string StepFrom(const std::string& x) {
  return absl::StrCat(
      "SELECT CASE WHEN ", x, ".unkeyed THEN u.last ELSE ",
      BlockLastSql(absl::StrCat(x, ".id")), " END AS run_end, CASE WHEN ", x,
      ".unkeyed THEN u.n ELSE 0 END AS n FROM (SELECT max(s.id::text)::uuid AS "
      "last, "
      "  count(*) FILTER (WHERE s.due) AS n FROM (SELECT j.id, "
      "    j.not_before <= clock_timestamp() "
      "      AND left(j.id::text, 18) <> ALL($10::text[]) AS due, "
      "    bool_and(j.key IS NULL) OVER (ORDER BY j.id) AS run "
      "  FROM sqlgroup.items j WHERE ",
      x,
      ".unkeyed AND j.group_name = $1 "
      "  AND j.id >= ",
      x,
      ".id AND j.id <= $6::uuid ORDER BY j.id LIMIT $7) s "
      "  WHERE s.run) u");
}

// $1 group, $2 session, $3 part, $4 epoch, $5 cursor, $6 last key of the
// range, $7 limit (items), $8 items of one key at most, $9 steps to walk
// at most, $10 keys to pass over (text[] of the first 18 characters of
// their ids: keys the member has with a handler already), $11 due heads
// wanted (an unkeyed item counts as one). The walk goes from the cursor
// one key at a time (a run of unkeyed items counts as one step) until it
// saw $11 due heads or walked $9 steps; each due head brings
// the run of its key's items that are due, up to $8 and up to an even
// share of $7 among the heads found (ClaimHeads passes $8 = 1: a handler
// of single items takes one item per key; batch handlers claim with
// kClaimRuns). Returns, on every row: owned, the item
// columns (NULL when none), then the steps walked, the due heads seen and
// where the walk's last step ended, so that the caller knows where to go
// on. Writes nothing, like the sweep's claim. With `pauses` (schema 17), a
// paused key's head is not due, and a paused group has no walk.
constexpr char kClaimHeads[] = "sqlgroup_claim_heads";
std::string ClaimHeadsSql(bool pauses) {
  return absl::StrCat(
      "WITH RECURSIVE t AS (SELECT ", TakeHeld(2, 3, 4, false),
      " AS owned), "
      "walk (id, run_end, unkeyed, step, due, n_due) AS ("
      "  SELECT f.id, r.run_end, f.unkeyed, 1, "
      "    CASE WHEN f.unkeyed THEN r.n > 0 ELSE f.due END, "
      "    CASE WHEN f.unkeyed THEN r.n ELSE f.due::int END "
      "  FROM t CROSS JOIN LATERAL ("
      "    SELECT i.id, i.key IS NULL AS unkeyed, ",
      FirstHeadDue("$1"), "      AND left(i.id::text, 18) <> ALL($10::text[])",
      KeyOpen(pauses, "i."),
      " AS due "
      "    FROM sqlgroup.items i WHERE t.owned",
      GroupOpen(pauses),
      " AND i.group_name = $1 "
      "    AND i.id BETWEEN $5::uuid AND $6::uuid ORDER BY i.id LIMIT 1) f "
      "  CROSS JOIN LATERAL (",
      StepFrom("f"),
      ") r "
      "  UNION ALL "
      "  SELECT n.id, r.run_end, n.unkeyed, w.step + 1, "
      "    CASE WHEN n.unkeyed THEN r.n > 0 ELSE n.due END, "
      "    w.n_due + CASE WHEN n.unkeyed THEN r.n ELSE n.due::int END "
      "  FROM walk w CROSS JOIN LATERAL ("
      "    SELECT i.id, i.key IS NULL AS unkeyed, "
      "      i.not_before <= clock_timestamp() "
      "      AND left(i.id::text, 18) <> ALL($10::text[])",
      KeyOpen(pauses, "i."),
      " AS due "
      "    FROM sqlgroup.items i WHERE i.group_name = $1 "
      "    AND i.id > w.run_end AND i.id <= $6::uuid ORDER BY i.id LIMIT 1) n "
      "  CROSS JOIN LATERAL (",
      StepFrom("n"),
      ") r "
      "  WHERE w.step < $9 AND w.n_due < $11), "
      "ends AS (SELECT max(step) AS steps, max(n_due) AS n_due, "
      "  (array_agg(run_end ORDER BY step DESC))[1] AS last_walked FROM walk) "
      "SELECT t.owned, ",
      kClaimedColumns,
      ", ends.steps, ends.n_due, ends.last_walked::text "
      "FROM t CROSS JOIN ends LEFT JOIN LATERAL ("
      "  SELECT r.* FROM walk w CROSS JOIN LATERAL ("
      "    SELECT s.id, s.key, s.payload, s.attempts, s.enqueued_at FROM ("
      "      SELECT i.id, i.key, i.payload, i.attempts, i.enqueued_at, "
      "        bool_and(i.not_before <= clock_timestamp()) "
      "        OVER (ORDER BY i.id) AS ok "
      "      FROM sqlgroup.items i WHERE NOT w.unkeyed AND i.group_name = $1 "
      "      AND i.id >= w.id AND i.id <= least(",
      BlockLastSql("w.id"),
      ", $6::uuid) ORDER BY i.id "
      "      LIMIT least($8, ceil($7::numeric / greatest(ends.n_due, 1))::int)"
      "    ) s WHERE s.ok "
      "    UNION ALL "
      "    SELECT i.id, i.key, i.payload, i.attempts, i.enqueued_at "
      "    FROM sqlgroup.items i WHERE w.unkeyed AND i.group_name = $1 "
      "    AND i.id BETWEEN w.id AND w.run_end AND i.key IS NULL "
      "    AND i.not_before <= clock_timestamp() "
      "    AND left(i.id::text, 18) <> ALL($10::text[])) r "
      "  WHERE w.due ORDER BY w.step, r.id LIMIT $7) i ON true");
}

// $1 group, $2 session, $3 part, $4 epoch, $5 cursor, $6 last key of the
// range, $7 items to read at most, $8 keys to pass over (as $10 of
// kClaimHeads), $9 whether the cursor goes on right after items of its key
// that this member acknowledged. The batch handler's claim: one read
// along the range from the cursor, as the sweep's, of rows each with
// whether it is due itself: not delayed or in backoff, not of a key passed
// over, and, for the first key's rows when the cursor is mid-block and
// unless $9, no older item of that key still there (a retry the cursor was
// moved past). Not probed with $9: that reads the index entries of the
// items just acknowledged, dead until vacuum. Which rows go to the handler
// (each key's prefix of due rows) RunsOf works out from these: in a
// statement, it took a window over the rows, a sort or a running
// aggregate per claim, on the server's CPU. Returns, for every row read:
// owned, the item columns (NULL when none; the payload NULL when the row
// is not due itself), then whether it is due. With `pauses` (schema 17):
// no row of a paused group or key is due, nor, with $9, one of the
// cursor's key while an older item of it was requeued at its old place
// (other than `acked`, the items the statement acknowledges first).
constexpr char kClaimRuns[] = "sqlgroup_claim_runs";
std::string ClaimRunsSql(bool pauses, const std::string& acked = "") {
  return absl::StrCat(
      "SELECT t.owned, i.id::text, i.key, "
      // A row held back goes without its payload (a key waiting with a
      // long backlog would otherwise ship claim_batch payloads each time).
      "  CASE WHEN i.due THEN i.payload END, i.attempts, "
      "  (date_part('epoch', i.enqueued_at) * 1000000)::bigint, "
      "  i.due FROM (SELECT ",
      TakeHeld(2, 3, 4, false),
      " AS owned) t LEFT JOIN LATERAL ("
      "  SELECT j.id, j.key, j.payload, j.attempts, j.enqueued_at, "
      "    j.not_before <= clock_timestamp() "
      "    AND (cardinality($8::text[]) = 0 "
      "      OR left(j.id::text, 18) <> ALL($8::text[]))",
      KeyOpen(pauses, "j."), "    AND (j.key IS NULL OR ($9",
      NoRequeuedBefore(pauses, "$5::uuid", acked),
      ") OR left(j.id::text, 18) <> left($5::text, 18) "
      "      OR NOT EXISTS (SELECT 1 FROM sqlgroup.items e "
      "        WHERE e.group_name = $1 AND e.id >= ",
      BlockFirstSql("$5::uuid"),
      "        AND e.id < $5::uuid)) AS due "
      "  FROM sqlgroup.items j WHERE t.owned",
      GroupOpen(pauses),
      "  AND j.group_name = $1 AND j.id BETWEEN $5::uuid AND $6::uuid "
      "  ORDER BY j.id LIMIT $7) i ON true");
}

// $1..$9 as in kClaimRuns, $10 ids (uuid[]): the ack of a batch and the
// claim of the next in one statement, as kAckAndClaim. The read sees the
// snapshot from before the delete, and starts after the acknowledged ids:
// at the next block, or right after them with $9 (so the look for older
// items of the cursor's key, which would see them, is not made).
constexpr char kAckAndClaimRuns[] = "sqlgroup_ack_and_claim_runs";
std::string AckAndClaimRunsSql(bool pauses) {
  return AckThen(WithIds(10), ClaimRunsSql(pauses, "$10::uuid[]"));
}

constexpr char kNextOfKey[] = "sqlgroup_next_of_key";

}  // namespace

std::string NextOfKeySql(bool pauses) {
  return absl::StrCat(
      "SELECT t.owned, ", kClaimedColumns, " FROM (SELECT ",
      TakeHeld(2, 3, 4, false),
      " AS owned) t LEFT JOIN LATERAL (SELECT * FROM sqlgroup.items i "
      "  WHERE t.owned",
      GroupOpen(pauses),
      " AND i.group_name = $1 AND i.id > $5::uuid "
      "  AND i.id <= $6::uuid ORDER BY i.id LIMIT 1) i "
      "ON i.not_before <= clock_timestamp()",
      KeyOpen(pauses, "i."), NoRequeuedBefore(pauses, "$5::uuid"));
}

namespace {

// $1..$6 as in kNextOfKey: the ack of the item $5 and the read of its
// key's next item in one statement, as kAckAndClaim. The read sees the
// snapshot from before the delete, and starts after $5.
constexpr char kAckAndNextOfKey[] = "sqlgroup_ack_and_next_of_key";
std::string AckAndNextOfKeySql(bool pauses) {
  return AckThen(WithId(5), NextOfKeySql(pauses));
}

// $1 group, $2 parts (int[]), $3 first keys (uuid[]), $4 last keys, $5
// blocks to walk at most per part. Per part: a walk from the range's start
// to its first due head; a part is due when it has one, or when the walk
// was cut short (a claim then walks on from its cursor). Otherwise, when
// the soonest of the heads it passed falls due. With `pauses` (schema 17),
// a paused key's head is not due, and a paused group's parts have none.
constexpr char kProbeHeads[] = "sqlgroup_probe_heads";
std::string ProbeHeadsSql(bool pauses) {
  return absl::StrCat(
      "WITH RECURSIVE walk (part, hi, id, step, due, nb) AS ("
      "  SELECT b.part, b.hi, i.id, 1, i.due, i.not_before "
      "  FROM unnest($2::int[], $3::uuid[], $4::uuid[]) AS b(part, lo, hi) "
      "  CROSS JOIN LATERAL (SELECT i.id, i.not_before, ",
      FirstHeadDue("$1"), KeyOpen(pauses, "i."),
      "    AS due FROM sqlgroup.items i WHERE i.group_name = $1",
      GroupOpen(pauses),
      "    AND i.id BETWEEN b.lo AND b.hi ORDER BY i.id LIMIT 1) i "
      "  UNION ALL "
      "  SELECT w.part, w.hi, n.id, w.step + 1, n.due, n.not_before "
      "  FROM walk w CROSS JOIN LATERAL ("
      "    SELECT i.id, i.not_before, i.not_before <= clock_timestamp()",
      KeyOpen(pauses, "i."),
      " AS due "
      "    FROM sqlgroup.items i WHERE i.group_name = $1 "
      "    AND i.id > ",
      BlockLastSql("w.id"),
      "    AND i.id <= w.hi ORDER BY i.id LIMIT 1) n "
      "  WHERE NOT w.due AND w.step < $5) "
      "SELECT part, bool_or(due) OR max(step) >= $5, ",
      MicrosOf("min(nb) FILTER (WHERE NOT due AND nb > clock_timestamp() "
               "AND nb < 'infinity') - clock_timestamp()"),
      " FROM walk GROUP BY part");
}

// $1 group, $2 parts (int[]), $3 first keys (uuid[]), $4 last keys, $5
// index entries to read at most per part. Per part: of its first $5 keyed
// items that failed at least once (items_retrying, in key order), those
// that are not due yet and head their key (no older item of their block
// is left), counted, with the oldest enqueue time among them. A failed
// item that is due again is about to be handed out, and one behind its
// key's head waits for the head, not for its own retry.
constexpr char kBlocked[] = "sqlgroup_blocked";
const std::string& BlockedSql() {
  static const std::string* const kSql = new std::string(absl::StrCat(
      "SELECT b.part, c.n, coalesce(", MicrosOf("clock_timestamp() - c.oldest"),
      ", 0) "
      "FROM unnest($2::int[], $3::uuid[], $4::uuid[]) AS b(part, lo, hi) "
      "CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE r.blocked) AS n, "
      "  min(r.enqueued_at) FILTER (WHERE r.blocked) AS oldest FROM ("
      "  SELECT i.enqueued_at, CASE WHEN i.not_before > clock_timestamp() "
      "    THEN NOT EXISTS (SELECT 1 FROM sqlgroup.items e "
      "      WHERE e.group_name = $1 AND e.id >= ",
      BlockFirstSql("i.id"),
      "      AND e.id < i.id) ELSE false END AS blocked "
      "  FROM sqlgroup.items i WHERE i.group_name = $1 AND i.attempts > 0 "
      "  AND i.key IS NOT NULL AND i.id BETWEEN b.lo AND b.hi "
      "  ORDER BY i.id LIMIT $5) r) c"));
  return *kSql;
}

}  // namespace

std::string BlockLastOf(const std::string& id) {
  return FormatUuid(BlockLast(BlockOf(*ParseUuid(id))));
}

namespace {

// The blocks of `keys` as the statements compare them: the first 18
// characters of an id's text form, as a text[] literal.
std::string BlockPrefixes(const std::vector<uint64_t>& keys) {
  std::vector<std::string> prefixes;
  prefixes.reserve(keys.size());
  for (uint64_t block : keys) {
    prefixes.push_back(FormatUuid(BlockStart(block)).substr(0, 18));
  }
  return SqlArray(prefixes);
}

std::vector<PartBlockedRow> BlockedRows(const pqxx::result& r) {
  std::vector<PartBlockedRow> rows;
  for (const pqxx::row& row : r) {
    PartBlockedRow blocked;
    blocked.part = row[0].as<int>();
    blocked.keys = row[1].as<int64_t>();
    blocked.oldest = absl::Microseconds(row[2].as<int64_t>());
    rows.push_back(blocked);
  }
  return rows;
}

// The claim of kClaimRuns' rows, whose columns start at `first`: of each
// key, the items up to its first that is not due, in key order. A key's
// rows are neighbours in id order (one block), so a keyed row is held back
// exactly when a keyed row of its block before it is not due. An unkeyed
// item is a key of its own, even when its id shares a block with
// another's (ids of unkeyed items spread by time): only its own due-ness
// counts. Also where the read got to: the block after the last row read,
// or the end of the range when it read fewer than `limit` rows.
absl::StatusOr<HeadClaim> RunsOf(const pqxx::result& r, int first,
                                 const ClaimRef& ref, Uuid128 last, int limit) {
  if (absl::Status s = ClaimOwned(r, first, ref); !s.ok()) return s;
  // Every row read becomes an item (one that is not due has no payload).
  struct Read {
    Item item;
    bool due;
  };
  std::vector<Read> read;
  read.reserve(r.size());
  for (auto row = r.begin(); row != r.end(); ++row) {
    pqxx::row::const_iterator f = row->begin();
    f += first + 1;
    if (f->is_null()) continue;  // owned, but nothing in the range
    Item item = ItemAt(f, ref);  // leaves `f` on `due`
    read.push_back({std::move(item), f->as<bool>()});
  }
  SortByKey(read, [](const Read& x) -> const Item& { return x.item; });
  HeadClaim out;
  // Where the read got to, from its last row (before the items move out).
  if (read.empty() || r.size() < static_cast<size_t>(limit)) {
    out.exhausted = true;
  } else {
    const uint64_t block = BlockOf(read.back().item);
    out.exhausted = block == ~uint64_t{0} || BlockLast(block) >= last;
    if (!out.exhausted) out.resume = BlockStart(block + 1);
  }
  out.items.reserve(read.size());
  std::optional<uint64_t> held;  // the block of the last keyed row not due
  for (Read& x : read) {
    // Only a keyed row's block matters: an unkeyed one is its own key.
    const std::optional<uint64_t> block =
        x.item.key ? std::optional(BlockOf(x.item)) : std::nullopt;
    if (x.due && !(block && held == block)) {
      out.items.push_back(std::move(x.item));
    }
    if (!x.due && block) held = block;
  }
  return out;
}

}  // namespace

void PrepareKeyedStatements(pqxx::connection& conn, bool pauses) {
  Prepare(conn, kClaimHeads, ClaimHeadsSql(pauses));
  Prepare(conn, kClaimRuns, ClaimRunsSql(pauses));
  Prepare(conn, kAckAndClaimRuns, AckAndClaimRunsSql(pauses));
  Prepare(conn, kNextOfKey, NextOfKeySql(pauses));
  Prepare(conn, kAckAndNextOfKey, AckAndNextOfKeySql(pauses));
  Prepare(conn, kProbeHeads, ProbeHeadsSql(pauses));
  Prepare(conn, kBlocked, BlockedSql());
}

absl::StatusOr<HeadClaim> ClaimHeads(pqxx::connection& conn,
                                     const ClaimRef& ref, Uuid128 from,
                                     Uuid128 last, int limit, int max_blocks,
                                     const std::vector<uint64_t>& pass_over) {
  return GuardOr<HeadClaim>("claim items", [&]() -> absl::StatusOr<HeadClaim> {
    pqxx::nontransaction tx(conn);
    const pqxx::result r =
        ExecPrepared(tx, kClaimHeads, ref.group, ref.session, ref.part,
                     ref.epoch, FormatUuid(from), FormatUuid(last), limit,
                     /*per_key=*/1, max_blocks, BlockPrefixes(pass_over),
                     /*heads=*/limit);
    absl::StatusOr<std::vector<Item>> items = ClaimedItems(r, 0, ref);
    if (!items.ok()) return items.status();
    HeadClaim out;
    out.items = std::move(*items);
    const pqxx::row& row = r[0];
    const int steps = row[6].is_null() ? 0 : row[6].as<int>();
    const int due = row[7].is_null() ? 0 : row[7].as<int>();
    // The walk ran out of blocks before either bound stopped it.
    out.exhausted = steps < max_blocks && due < limit;
    // The next walk starts after the last block this one passed.
    Uuid128 after_block = 0;
    bool wraps = true;
    auto after = [&](Uuid128 id) {
      const uint64_t block = BlockOf(id);
      wraps = block == ~uint64_t{0} || BlockLast(block) >= last;
      after_block = wraps ? 0 : BlockStart(block + 1);
    };
    if (!out.items.empty()) {
      after(PositionOf(out.items.back()));
    } else if (!row[8].is_null()) {
      after(*ParseUuid(row[8].as<std::string>()));
    }
    if (wraps) out.exhausted = true;
    out.resume = after_block;
    return out;
  });
}

absl::StatusOr<HeadClaim> ClaimRuns(pqxx::connection& conn, const ClaimRef& ref,
                                    Uuid128 from, Uuid128 last, int limit,
                                    const std::vector<uint64_t>& pass_over,
                                    bool continued) {
  return GuardOr<HeadClaim>("claim items", [&]() -> absl::StatusOr<HeadClaim> {
    pqxx::nontransaction tx(conn);
    return RunsOf(ExecPrepared(tx, kClaimRuns, ref.group, ref.session, ref.part,
                               ref.epoch, FormatUuid(from), FormatUuid(last),
                               limit, BlockPrefixes(pass_over), continued),
                  0, ref, last, limit);
  });
}

AckedAndClaimed AckAndClaimRuns(pqxx::connection& conn, const ClaimRef& ref,
                                const std::vector<std::string>& ids,
                                Uuid128 from, Uuid128 last, int limit,
                                const std::vector<uint64_t>& pass_over,
                                bool continued) {
  pqxx::nontransaction tx(conn);
  const pqxx::result r =
      ExecPrepared(tx, kAckAndClaimRuns, ref.group, ref.session, ref.part,
                   ref.epoch, FormatUuid(from), FormatUuid(last), limit,
                   BlockPrefixes(pass_over), continued, KeyOrderedIds(ids));
  AckedAndClaimed out;
  out.acked = r.empty() ? 0 : r[0][0].as<int64_t>();
  absl::StatusOr<HeadClaim> claim = RunsOf(r, 1, ref, last, limit);
  if (!claim.ok()) {
    out.next = claim.status();
    return out;
  }
  out.next = std::move(claim->items);
  out.exhausted = claim->exhausted;
  out.resume = claim->resume;
  return out;
}

absl::StatusOr<std::vector<Item>> NextOfKey(pqxx::connection& conn,
                                            const ClaimRef& ref,
                                            const std::string& settled) {
  return GuardOr<std::vector<Item>>("claim items", [&] {
    pqxx::nontransaction tx(conn);
    return ClaimedItems(
        ExecPrepared(tx, kNextOfKey, ref.group, ref.session, ref.part,
                     ref.epoch, settled, BlockLastOf(settled)),
        0, ref);
  });
}

AckedAndClaimed AckAndNextOfKey(pqxx::connection& conn, const ClaimRef& ref,
                                const std::string& id) {
  pqxx::nontransaction tx(conn);
  return AckAndNextOfKey(tx, ref, id);
}

AckedAndClaimed AckAndNextOfKey(pqxx::transaction_base& tx, const ClaimRef& ref,
                                const std::string& id) {
  const pqxx::result r =
      ExecPrepared(tx, kAckAndNextOfKey, ref.group, ref.session, ref.part,
                   ref.epoch, id, BlockLastOf(id));
  return {r.empty() ? 0 : r[0][0].as<int64_t>(), ClaimedItems(r, 1, ref)};
}

absl::StatusOr<ProbeResult> ProbeHeads(pqxx::connection& conn,
                                       const std::string& group,
                                       const std::vector<int>& parts,
                                       const std::vector<KeyRange>& ranges,
                                       int max_blocks) {
  return GuardOr<ProbeResult>("look for due items", [&] {
    const Ranges r = RangeArrays(ranges);
    pqxx::nontransaction tx(conn);
    return ProbeResultOf(ExecPrepared(tx, kProbeHeads, group, SqlArray(parts),
                                      r.firsts, r.lasts, max_blocks));
  });
}

absl::StatusOr<std::vector<PartBlockedRow>> MeasureBlocked(
    pqxx::connection& conn, const std::string& group,
    const std::vector<int>& parts, const std::vector<KeyRange>& ranges,
    int cap) {
  return GuardOr<std::vector<PartBlockedRow>>("count blocked keys", [&] {
    // Bounded, but never one that holds back vacuum for long (as the lag).
    pqxx::work tx(conn);
    LocalLimits(tx);
    tx.exec("SET LOCAL statement_timeout = 5000");
    const Ranges r = RangeArrays(ranges);
    std::vector<PartBlockedRow> rows = BlockedRows(ExecPrepared(
        tx, kBlocked, group, SqlArray(parts), r.firsts, r.lasts, cap));
    tx.commit();
    return rows;
  });
}

std::vector<PartBlockedRow> CountBlocked(pqxx::transaction_base& tx,
                                         const std::string& group,
                                         const std::vector<int>& parts,
                                         const std::vector<KeyRange>& ranges) {
  const Ranges r = RangeArrays(ranges);
  return BlockedRows(tx.exec_params(BlockedSql(), group, SqlArray(parts),
                                    r.firsts, r.lasts,
                                    std::numeric_limits<int64_t>::max()));
}

}  // namespace sqlgroup::store
