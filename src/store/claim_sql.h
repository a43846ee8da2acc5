// Pieces shared by the statements that claim and settle items
// (item_store.cc: the sweep in key order; keyed_claims.cc: the walk over
// the heads of keys): the fence on the take, and reading claimed rows.
#ifndef SQLGROUP_STORE_CLAIM_SQL_H_
#define SQLGROUP_STORE_CLAIM_SQL_H_

#include <algorithm>
#include <pqxx/connection>
#include <pqxx/result>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sqlgroup/item.h"
#include "store/item_store.h"

namespace sqlgroup::store {

// With `pauses`, " AND " a condition that group $1 is not paused (an
// uncorrelated InitPlan: once per statement); else empty.
std::string GroupOpen(bool pauses);
// With `pauses`, " AND " a condition that the row `row` ("i.", or "" for
// the table's own columns) is not of a paused key of group $1 (its block
// against the group's paused blocks, read once per statement); else empty.
std::string KeyOpen(bool pauses, const std::string& row);
// With `pauses`, " AND " a condition that no item of the block of the
// uuid expression `id` older than it was put back from the dead letters
// at its old place (items_requeued, a small index): the key's next item
// after `id` is its head only then. `acked`: a uuid[] expression of items
// the same statement acknowledges (its read sees them still), not counted.
// Else empty.
std::string NoRequeuedBefore(bool pauses, const std::string& id,
                             const std::string& acked = "");

// Whether the take `$<session>, $<part>, $<epoch>` of group $1 still owns
// its part and its session is alive by the database clock: a zombie past
// its TTL can neither claim nor settle anything, even before it is reaped.
// Uncorrelated, so it runs once per statement (an InitPlan).
//
// `hold`: the fence of every statement that settles an item (ack,
// release, dead-letter) also holds the take FOR KEY SHARE, so a drop or a
// reap of the part (a DELETE of that row) waits until the statement's
// transaction ends: an ack either commits before the part moves or finds
// the take gone, never in between.
std::string TakeHeld(int session, int part, int epoch, bool hold);

// TakeHeld of the take in the SQL expressions `session`, `part` and
// `epoch` (columns of each row, for a statement that settles the items of
// several takes: then it runs once per row).
std::string TakeHeldOf(const std::string& session, const std::string& part,
                       const std::string& epoch, bool hold);

// A query of the takes of group $1 among the (session_id, part, epoch)
// rows of `rows` (a relation) that are held, as TakeHeld with `hold`: each
// distinct take checked and locked once, in part and epoch order (the
// order a drop of several parts locks them). For a statement that settles
// many items of a few takes (the per-row check costs more there).
std::string TakesHeldIn(const std::string& rows);

// Rows of group $1 whose ids are in parameter `ids`, a uuid[] in key order
// (KeyOrderedIds): `id = ANY(...)` and between its first and last, so
// that the primary key is the index that narrows the statement most under
// any statistics (without the bounds, PostgreSQL 14 read every entry of
// the group in items_waiting_since for a generic plan made from a
// churning table's statistics).
std::string WithIds(int ids);

// The row of group $1 whose id is parameter `id`, a uuid: the ack of one
// item is an equality on the primary key, with no array to build, bound
// or search (about 3 µs of server CPU an item less; bench/RESULTS.md,
// session 20).
std::string WithId(int id);

// The ids as a uuid[] literal in key order, for WithIds.
std::string KeyOrderedIds(const std::vector<std::string>& ids);

// The ack: the fenced delete of the items `which` (WithIds or WithId) of
// group $1, under the take of the other three.
std::string AckDelete(const std::string& which, int session, int part,
                      int epoch);
// AckDelete's statement, returning `returning` for each row deleted.
std::string AckDeleteReturning(const std::string& which, int session, int part,
                               int epoch, const std::string& returning);

// AckDelete (of the items `which`, the take in $2, $3, $4) and then the
// read `claim` in one statement, one round trip: the count deleted, then
// the read's columns. The read sees the statement's snapshot, from before
// the delete, so it must start after the acknowledged ids. `returning`:
// what the delete returns per row; a function called there (a
// SqlFunction handler) runs once for each row deleted, whatever reads it.
std::string AckThen(const std::string& which, const std::string& claim,
                    const std::string& returning = "1");

// $1 group, $2 session, $3 part, $4 epoch, $5 an item just settled, $6
// the last id of its key's block (BlockLastOf): the key's next item, when
// it is due (a next item that is not holds the key back: no row).
std::string NextOfKeySql(bool pauses);
// The last id of the block (key) of the item `id`, as text.
std::string BlockLastOf(const std::string& id);

// A bytea field's bytes (empty when NULL), decoded straight from its hex
// text (the server's default bytea_output) into `out`: pqxx::binarystring
// goes through an unescaped copy and a shared buffer first, two
// allocations and a copy per item on the claim's path.
void ReadBytea(const pqxx::field& f, std::string* out);

// The columns a claim returns for each item, after `owned`, as
// ClaimedItems reads them: id, key, payload, attempts, enqueued_at in
// microseconds (computed in float8: extract() computes in numeric, a cost
// per row the batch path noticed). `i` names the items table.
inline constexpr char kClaimedColumns[] =
    "i.id::text, i.key, i.payload, i.attempts, "
    "(date_part('epoch', i.enqueued_at) * 1000000)::bigint";

// ABORTED unless the first row's column `first` (owned) is true.
absl::Status ClaimOwned(const pqxx::result& r, int first, const ClaimRef& ref);

// The item of one such row (below), from `f` on its id column (not NULL);
// leaves `f` on the column after the item's. (An iterator: `row[j]` makes
// a pqxx object per field, each with a copy of the result.)
Item ItemAt(pqxx::row::const_iterator& f, const ClaimRef& ref);

// Puts `rows` in key order of their items (`item_of(row)`): their ids are
// canonical lowercase text, whose order is the keys'. The claims' joins
// promise no order, though the rows come in it: then nothing moves.
template <typename Row, typename ItemOf>
void SortByKey(std::vector<Row>& rows, ItemOf item_of) {
  const auto by_id = [&](const Row& a, const Row& b) {
    return item_of(a).id < item_of(b).id;
  };
  if (!std::is_sorted(rows.begin(), rows.end(), by_id)) {
    std::sort(rows.begin(), rows.end(), by_id);
  }
}

// The items of a claim's rows, whose columns start at `first` (owned,
// then kClaimedColumns): ABORTED when the take did not hold. Items come
// out in key order.
absl::StatusOr<std::vector<Item>> ClaimedItems(const pqxx::result& r, int first,
                                               const ClaimRef& ref);

// The first and last keys of `ranges`, as uuid[] literals, for the
// statements that look at many parts at once.
struct Ranges {
  std::string firsts, lasts;
};
Ranges RangeArrays(const std::vector<KeyRange>& ranges);

// A probe's rows (part, due, microseconds until the soonest waiting item
// falls due or NULL) as a ProbeResult.
ProbeResult ProbeResultOf(const pqxx::result& r);

// Prepares ClaimHeads' and ProbeHeads' statements (PrepareItemStatements
// calls it).
void PrepareKeyedStatements(pqxx::connection& conn, bool pauses);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_CLAIM_SQL_H_
