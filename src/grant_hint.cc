#include "grant_hint.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "dsn.h"
#include "grants.h"

namespace sqlgroup::internal {

absl::Status WithGrantHint(const absl::Status& s, const std::string& dsn,
                           const std::string& kind, const std::string& group) {
  if (!absl::IsPermissionDenied(s) ||
      absl::StrContains(s.message(), "sqlgroup grant --")) {
    return s;
  }
  const std::string role = RoleOfDsn(dsn);
  return absl::PermissionDeniedError(absl::StrCat(
      s.message(), ". This ", kind, " connects as role ", QuoteIdentifier(role),
      ", which lacks what a ", kind,
      " needs: the schema's owner grants it with `sqlgroup grant --", kind,
      "_role ", role, group.empty() ? "" : absl::StrCat(" --group ", group),
      "` (again after every `sqlgroup migrate`",
      group.empty() ? ""
                    : "; a grant replaces the role's groups, so name its "
                      "other groups too, or leave --group out for every group",
      ")"));
}

}  // namespace sqlgroup::internal
