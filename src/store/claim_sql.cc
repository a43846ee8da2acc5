#include "store/claim_sql.h"

#include <algorithm>
#include <pqxx/binarystring>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "store/member_store.h"

namespace sqlgroup::store {

namespace {
// Group $1's paused keys' blocks, as a text[] (a subquery that refers to
// nothing of the row: PostgreSQL runs it once per statement).
constexpr char kPausedBlocks[] =
    "ARRAY(SELECT p.block FROM sqlgroup.pauses p "
    "WHERE p.group_name = $1 AND p.block <> '')";
}  // namespace

std::string GroupOpen(bool pauses) {
  if (!pauses) return "";
  return " AND NOT EXISTS (SELECT 1 FROM sqlgroup.pauses gp "
         "WHERE gp.group_name = $1 AND gp.block = '')";
}

std::string KeyOpen(bool pauses, const std::string& row) {
  if (!pauses) return "";
  return absl::StrCat(" AND (", row, "key IS NULL OR left(", row,
                      "id::text, 18) <> ALL (", kPausedBlocks, "))");
}

std::string NoRequeuedBefore(bool pauses, const std::string& id,
                             const std::string& acked) {
  if (!pauses) return "";
  return absl::StrCat(
      " AND NOT EXISTS (SELECT 1 FROM sqlgroup.items rq "
      "WHERE rq.group_name = $1 AND rq.requeued_at IS NOT NULL "
      "AND rq.id >= (left(",
      id, "::text, 18) || '-0000-000000000000')::uuid AND rq.id < ", id,
      acked.empty() ? "" : absl::StrCat(" AND rq.id <> ALL (", acked, ")"),
      ")");
}

namespace {
// The takes of group $1 with their sessions and groups, and whether one's
// session is alive by the database clock (heartbeated within the TTL, or
// a static member away within its timeout): the fence every claim and
// every settling statement shares.
constexpr char kTakes[] =
    "sqlgroup.session_parts sp JOIN sqlgroup.sessions s "
    "  ON s.group_name = sp.group_name AND s.id = sp.session_id "
    "JOIN sqlgroup.groups g ON g.name = sp.group_name";
constexpr char kTakeAlive[] =
    "(s.heartbeated_at > clock_timestamp() - g.session_ttl "
    "  OR coalesce(s.away_until, '-infinity') > clock_timestamp())";
}  // namespace

std::string TakeHeld(int session, int part, int epoch, bool hold) {
  return TakeHeldOf(absl::StrCat("$", session, "::uuid"),
                    absl::StrCat("$", part), absl::StrCat("$", epoch), hold);
}

std::string TakeHeldOf(const std::string& session, const std::string& part,
                       const std::string& epoch, bool hold) {
  return absl::StrCat("EXISTS (SELECT 1 FROM ", kTakes,
                      " WHERE sp.group_name = $1 AND sp.part = ", part,
                      " AND sp.session_id = ", session,
                      " AND sp.epoch = ", epoch, " AND ", kTakeAlive,
                      hold ? " FOR KEY SHARE OF sp)" : ")");
}

std::string TakesHeldIn(const std::string& rows) {
  return absl::StrCat(
      "SELECT sp.session_id, sp.part, sp.epoch FROM ", kTakes,
      " WHERE sp.group_name = $1 AND (sp.session_id, sp.part, sp.epoch) IN "
      "(SELECT DISTINCT session_id, part, epoch FROM ",
      rows, ") AND ", kTakeAlive,
      " ORDER BY sp.part, sp.epoch FOR KEY SHARE OF sp");
}

std::string WithIds(int ids) {
  const std::string a = absl::StrCat("($", ids, "::uuid[])");
  // The list itself is no index condition (IS TRUE): the statement reads
  // the stretch of the primary key between the first and the last id once,
  // whatever the planner would guess of an array of unknown length.
  return absl::StrCat("group_name = $1 AND id BETWEEN ", a, "[1] AND ", a,
                      "[cardinality", a, "] AND (id = ANY", a, ") IS TRUE");
}

std::string WithId(int id) {
  return absl::StrCat("group_name = $1 AND id = $", id, "::uuid");
}

std::string KeyOrderedIds(const std::vector<std::string>& ids) {
  // Canonical lowercase text (as claims read it), whose order is the
  // keys'; claims hand items out in it.
  if (std::is_sorted(ids.begin(), ids.end())) return SqlArray(ids);
  std::vector<std::string> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  return SqlArray(sorted);
}

std::string AckDelete(const std::string& which, int session, int part,
                      int epoch) {
  return absl::StrCat("DELETE FROM sqlgroup.items WHERE ", which, " AND ",
                      TakeHeld(session, part, epoch, true));
}

std::string AckDeleteReturning(const std::string& which, int session, int part,
                               int epoch, const std::string& returning) {
  return absl::StrCat(AckDelete(which, session, part, epoch), " RETURNING ",
                      returning);
}

std::string AckThen(const std::string& which, const std::string& claim,
                    const std::string& returning) {
  // A data-modifying WITH runs to its end, RETURNING included, however
  // much of it the rest of the statement reads.
  return absl::StrCat(
      "WITH acked AS (", AckDeleteReturning(which, 2, 3, 4, returning),
      ") SELECT (SELECT count(*) FROM acked), c.* FROM (", claim, ") c");
}

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void ReadBytea(const pqxx::field& f, std::string* out) {
  const char* text = f.c_str();
  const size_t n = f.size();
  if (f.is_null()) {
    out->clear();
    return;
  }
  if (n >= 2 && text[0] == '\\' && text[1] == 'x' && n % 2 == 0) {
    out->resize((n - 2) / 2);
    bool hex = true;
    for (size_t i = 0; i < out->size() && hex; ++i) {
      const int hi = HexValue(text[2 + 2 * i]);
      const int lo = HexValue(text[3 + 2 * i]);
      hex = hi >= 0 && lo >= 0;
      if (hex) (*out)[i] = static_cast<char>(hi << 4 | lo);
    }
    if (hex) return;
  }
  *out = pqxx::binarystring(f).str();  // bytea_output = 'escape'
}

Item ItemAt(pqxx::row::const_iterator& f, const ClaimRef& ref) {
  Item item;
  item.id.assign(f->c_str(), f->size());
  ++f;
  if (!f->is_null()) item.key = std::string(f->c_str(), f->size());
  ++f;
  ReadBytea(*f, &item.payload);
  ++f;
  item.attempt = f->as<int>() + 1;
  ++f;
  item.enqueued_at = absl::FromUnixMicros(f->as<int64_t>());
  ++f;
  item.part = ref.part;
  item.session = ref.session;
  item.epoch = ref.epoch;
  return item;
}

absl::Status ClaimOwned(const pqxx::result& r, int first, const ClaimRef& ref) {
  if (r.empty() || !r[0][first].as<bool>()) {
    return absl::AbortedError(absl::StrCat("claim items: part ", ref.part,
                                           " is no longer owned under epoch ",
                                           ref.epoch, " by a live session"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Item>> ClaimedItems(const pqxx::result& r, int first,
                                               const ClaimRef& ref) {
  if (absl::Status s = ClaimOwned(r, first, ref); !s.ok()) return s;
  std::vector<Item> items;
  items.reserve(r.size());
  // Iterators, not r[i][j]: each of those is a pqxx object holding a copy
  // of the result (two shared pointers), per field of every row.
  for (auto row = r.begin(); row != r.end(); ++row) {
    pqxx::row::const_iterator f = row->begin();
    f += first + 1;
    if (f->is_null()) continue;  // owned, but nothing due
    items.push_back(ItemAt(f, ref));
  }
  SortByKey(items, [](const Item& item) -> const Item& { return item; });
  return items;
}

Ranges RangeArrays(const std::vector<KeyRange>& ranges) {
  std::vector<std::string> firsts, lasts;
  for (const KeyRange& r : ranges) {
    firsts.push_back(FormatUuid(r.first));
    lasts.push_back(FormatUuid(r.last));
  }
  return {SqlArray(firsts), SqlArray(lasts)};
}

ProbeResult ProbeResultOf(const pqxx::result& r) {
  ProbeResult out;
  for (const pqxx::row& row : r) {
    if (row[1].as<bool>()) {
      out.due.push_back(row[0].as<int>());
    } else if (!row[2].is_null()) {
      out.soonest =
          std::min(out.soonest, absl::Microseconds(row[2].as<int64_t>()));
    }
  }
  return out;
}

}  // namespace sqlgroup::store
