#include "store/claim_sql.h"

#include <algorithm>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "store/member_store.h"

namespace sqlgroup::store {

std::string TakeHeld(int session, int part, int epoch, bool hold) {
  return absl::StrCat(
      "EXISTS (SELECT 1 FROM sqlgroup.session_parts sp "
      "  JOIN sqlgroup.sessions s "
      "    ON s.group_name = sp.group_name AND s.id = sp.session_id "
      "  JOIN sqlgroup.groups g ON g.name = sp.group_name "
      "  WHERE sp.group_name = $1 AND sp.part = $",
      part, " AND sp.session_id = $", session, "::uuid AND sp.epoch = $", epoch,
      "  AND (s.heartbeated_at > clock_timestamp() - g.session_ttl "
      "    OR coalesce(s.away_until, '-infinity') > clock_timestamp())",
      hold ? "  FOR KEY SHARE OF sp)" : ")");
}

std::string AckDelete(int ids, int session, int part, int epoch) {
  return absl::StrCat("DELETE FROM sqlgroup.items WHERE group_name = $1 ",
                      "AND id = ANY($", ids, "::uuid[]) AND ",
                      TakeHeld(session, part, epoch, true));
}

std::string AckThen(int ids, const std::string& claim) {
  return absl::StrCat("WITH acked AS (", AckDelete(ids, 2, 3, 4),
                      " RETURNING 1) SELECT (SELECT count(*) FROM acked), "
                      "c.* FROM (",
                      claim, ") c");
}

Item ItemOf(const pqxx::row& row, int first, const ClaimRef& ref) {
  Item item;
  const pqxx::field id = row[first + 1];
  item.id.assign(id.c_str(), id.size());
  const pqxx::field key = row[first + 2];
  if (!key.is_null()) item.key = std::string(key.c_str(), key.size());
  item.payload = pqxx::binarystring(row[first + 3]).str();
  item.attempt = row[first + 4].as<int>() + 1;
  item.part = ref.part;
  item.session = ref.session;
  item.epoch = ref.epoch;
  item.enqueued_at = absl::FromUnixMicros(row[first + 5].as<int64_t>());
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
  for (const pqxx::row& row : r) {
    if (row[first + 1].is_null()) continue;  // owned, but nothing due
    items.push_back(ItemOf(row, first, ref));
  }
  // The joins promise no order; handlers see key order.
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.id < b.id; });
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
