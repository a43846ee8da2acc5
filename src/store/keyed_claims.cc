// Claims and probes under per-key order (groups.ordering = 'key'): a walk
// over the heads of the keys in a part's range. All items of a key share
// one 64-bit block of ids (key_placement.h), in enqueue order, so a key's
// head is the first item of its block; the walk visits one item per block
// with one index probe each and never reads behind a head. A head that is
// not due (in backoff after a failure, or delayed) blocks its key, and
// only its key: the walk steps over the whole block. Unkeyed items each
// have a block of their own, so they are never held back.
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "key_placement.h"
#include "store/claim_sql.h"
#include "store/errors.h"
#include "store/interval.h"
#include "store/item_store.h"
#include "store/member_store.h"

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

// $1 group, $2 session, $3 part, $4 epoch, $5 cursor, $6 last key of the
// range, $7 limit (items), $8 items of one key at most, $9 blocks to walk
// at most. The walk goes from the cursor one block at a time until it saw
// $7 due heads or walked $9 blocks; each due head brings the run of its
// key's items that are due, up to $8 (a batch handler acknowledges a run
// together; one at a time otherwise). Returns, on every row: owned, the
// item columns (NULL when none), then the blocks walked, the due heads
// seen and the last block's head, so that the caller knows where the walk
// ended. Writes nothing, like the sweep's claim.
constexpr char kClaimHeads[] = "sqlgroup_claim_heads";
const std::string& ClaimHeadsSql() {
  static const std::string* const kSql = new std::string(absl::StrCat(
      "WITH RECURSIVE t AS (SELECT ", TakeHeld(2, 3, 4, false),
      " AS owned), "
      "walk (id, step, due, n_due) AS ("
      "  SELECT f.id, 1, f.due, f.due::int FROM t CROSS JOIN LATERAL ("
      "    SELECT i.id, ",
      FirstHeadDue("$1"),
      " AS due "
      "    FROM sqlgroup.items i WHERE t.owned AND i.group_name = $1 "
      "    AND i.id BETWEEN $5::uuid AND $6::uuid ORDER BY i.id LIMIT 1) f "
      "  UNION ALL "
      "  SELECT n.id, w.step + 1, n.due, w.n_due + n.due::int "
      "  FROM walk w CROSS JOIN LATERAL ("
      "    SELECT i.id, i.not_before <= clock_timestamp() AS due "
      "    FROM sqlgroup.items i WHERE i.group_name = $1 "
      "    AND i.id > ",
      BlockLastSql("w.id"),
      "    AND i.id <= $6::uuid ORDER BY i.id LIMIT 1) n "
      "  WHERE w.step < $9 AND w.n_due < $7), "
      "ends AS (SELECT max(step) AS steps, max(n_due) AS n_due, "
      "  (array_agg(id ORDER BY step DESC))[1] AS last_walked FROM walk) "
      "SELECT t.owned, ",
      kClaimedColumns,
      ", ends.steps, ends.n_due, ends.last_walked::text "
      "FROM t CROSS JOIN ends LEFT JOIN LATERAL ("
      "  SELECT r.* FROM walk w CROSS JOIN LATERAL ("
      "    SELECT s.* FROM (SELECT i.id, i.key, i.payload, i.attempts, "
      "        i.enqueued_at, bool_and(i.not_before <= clock_timestamp()) "
      "        OVER (ORDER BY i.id) AS ok "
      "      FROM sqlgroup.items i WHERE i.group_name = $1 AND i.id >= w.id "
      "      AND i.id <= least(",
      BlockLastSql("w.id"),
      ", $6::uuid) ORDER BY i.id LIMIT $8) s WHERE s.ok) r "
      "  WHERE w.due ORDER BY w.step, r.id LIMIT $7) i ON true"));
  return *kSql;
}

// $1 group, $2 parts (int[]), $3 first keys (uuid[]), $4 last keys, $5
// blocks to walk at most per part. Per part: a walk from the range's start
// to its first due head; a part is due when it has one, or when the walk
// was cut short (a claim then walks on from its cursor). Otherwise, when
// the soonest of the heads it passed falls due.
constexpr char kProbeHeads[] = "sqlgroup_probe_heads";
const std::string& ProbeHeadsSql() {
  static const std::string* const kSql = new std::string(absl::StrCat(
      "WITH RECURSIVE walk (part, hi, id, step, due, nb) AS ("
      "  SELECT b.part, b.hi, i.id, 1, i.due, i.not_before "
      "  FROM unnest($2::int[], $3::uuid[], $4::uuid[]) AS b(part, lo, hi) "
      "  CROSS JOIN LATERAL (SELECT i.id, i.not_before, ",
      FirstHeadDue("$1"),
      "    AS due FROM sqlgroup.items i WHERE i.group_name = $1 "
      "    AND i.id BETWEEN b.lo AND b.hi ORDER BY i.id LIMIT 1) i "
      "  UNION ALL "
      "  SELECT w.part, w.hi, n.id, w.step + 1, n.due, n.not_before "
      "  FROM walk w CROSS JOIN LATERAL ("
      "    SELECT i.id, i.not_before, i.not_before <= clock_timestamp() AS due "
      "    FROM sqlgroup.items i WHERE i.group_name = $1 "
      "    AND i.id > ",
      BlockLastSql("w.id"),
      "    AND i.id <= w.hi ORDER BY i.id LIMIT 1) n "
      "  WHERE NOT w.due AND w.step < $5) "
      "SELECT part, bool_or(due) OR max(step) >= $5, ",
      MicrosOf("min(nb) FILTER (WHERE NOT due AND nb > clock_timestamp() "
               "AND nb < 'infinity') - clock_timestamp()"),
      " FROM walk GROUP BY part"));
  return *kSql;
}

}  // namespace

void PrepareKeyedStatements(pqxx::connection& conn) {
  conn.prepare(kClaimHeads, ClaimHeadsSql());
  conn.prepare(kProbeHeads, ProbeHeadsSql());
}

absl::StatusOr<HeadClaim> ClaimHeads(pqxx::connection& conn,
                                     const ClaimRef& ref, Uuid128 from,
                                     Uuid128 last, int limit, int per_key,
                                     int max_blocks) {
  return GuardOr<HeadClaim>("claim items", [&]() -> absl::StatusOr<HeadClaim> {
    pqxx::nontransaction tx(conn);
    const pqxx::result r = tx.exec_prepared(
        kClaimHeads, ref.group, ref.session, ref.part, ref.epoch,
        FormatUuid(from), FormatUuid(last), limit, per_key, max_blocks);
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
      after(*ParseUuid(out.items.back().id));
    } else if (!row[8].is_null()) {
      after(*ParseUuid(row[8].as<std::string>()));
    }
    if (wraps) out.exhausted = true;
    out.resume = after_block;
    return out;
  });
}

absl::StatusOr<ProbeResult> ProbeHeads(pqxx::connection& conn,
                                       const std::string& group,
                                       const std::vector<int>& parts,
                                       const std::vector<KeyRange>& ranges,
                                       int max_blocks) {
  return GuardOr<ProbeResult>("look for due items", [&] {
    std::vector<std::string> firsts, lasts;
    for (const KeyRange& r : ranges) {
      firsts.push_back(FormatUuid(r.first));
      lasts.push_back(FormatUuid(r.last));
    }
    pqxx::nontransaction tx(conn);
    ProbeResult out;
    for (const pqxx::row& row :
         tx.exec_prepared(kProbeHeads, group, SqlArray(parts), SqlArray(firsts),
                          SqlArray(lasts), max_blocks)) {
      if (row[1].as<bool>()) {
        out.due.push_back(row[0].as<int>());
      } else if (!row[2].is_null()) {
        out.soonest =
            std::min(out.soonest, absl::Microseconds(row[2].as<int64_t>()));
      }
    }
    return out;
  });
}

}  // namespace sqlgroup::store
