#include "store/still_due.h"

#include <pqxx/nontransaction>

#include "absl/strings/str_cat.h"
#include "store/claim_sql.h"
#include "store/errors.h"
#include "store/statements.h"

namespace sqlgroup::store {
namespace {

// $1 group, $2 ids (uuid[], in key order: KeyOrderedIds): those still
// waiting, due and not paused, by the same tests as the claim, along the
// primary key between the first and the last (WithIds).
constexpr char kStillDue[] = "sqlgroup_still_due";
std::string StillDueSql(bool pauses) {
  return absl::StrCat("SELECT id::text FROM sqlgroup.items WHERE ", WithIds(2),
                      " AND not_before <= clock_timestamp()", GroupOpen(pauses),
                      KeyOpen(pauses, ""));
}

}  // namespace

void PrepareStillDue(pqxx::connection& conn, bool pauses) {
  Prepare(conn, kStillDue, StillDueSql(pauses));
}

absl::StatusOr<std::set<std::string>> StillDue(
    pqxx::connection& conn, const ClaimRef& ref,
    const std::vector<std::string>& ids) {
  return GuardOr<std::set<std::string>>(
      "read again whether claimed items are still due", [&] {
        pqxx::nontransaction tx(conn);
        const pqxx::result r =
            ExecPrepared(tx, kStillDue, ref.group, KeyOrderedIds(ids));
        std::set<std::string> due;
        for (const auto& row : r) due.insert(row[0].c_str());
        return due;
      });
}

}  // namespace sqlgroup::store
