#include "store/grant_check.h"

#include <pqxx/pqxx>

#include "absl/strings/match.h"
#include "store/connection.h"
#include "store/errors.h"

namespace sqlgroup::store {

absl::Status MissingOrNotGranted(pqxx::connection& conn,
                                 const std::string& kind,
                                 const std::string& group,
                                 const absl::Status& not_found) {
  if (!absl::IsNotFound(not_found)) return not_found;
  const absl::Status asked = Guard("", [&] {
    pqxx::nontransaction tx(conn);
    tx.exec_params("SELECT sqlgroup.require_grant($1, $2)", kind, group);
  });
  // Only the function's own refusal says the grant is missing; no such
  // function (an older schema) or no right to call it says nothing.
  if (absl::IsPermissionDenied(asked) &&
      absl::StrContains(asked.message(), "`sqlgroup grant --")) {
    // The function's sentence alone: not PostgreSQL's ERROR: and CONTEXT.
    absl::string_view said = asked.message();
    const size_t start = said.find("role ");
    said = said.substr(start == absl::string_view::npos ? 0 : start);
    said = said.substr(0, said.find('\n'));
    return absl::PermissionDeniedError(said);
  }
  return not_found;
}

absl::Status MissingOrNotGranted(DbConnection& db, const std::string& kind,
                                 const std::string& group,
                                 const absl::Status& not_found) {
  return MissingOrNotGranted(PqxxOf(db), kind, group, not_found);
}

}  // namespace sqlgroup::store
