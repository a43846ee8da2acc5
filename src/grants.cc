#include "grants.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace sqlgroup::internal {

std::string QuoteIdentifier(const std::string& role) {
  return absl::StrCat("\"", absl::StrReplaceAll(role, {{"\"", "\"\""}}), "\"");
}

std::string RevokeAllSql(const std::string& role) {
  const std::string quoted = QuoteIdentifier(role);
  // Revoking a table's privileges revokes its column privileges too.
  return absl::StrCat(
      "REVOKE ALL ON ALL TABLES IN SCHEMA sqlgroup FROM ", quoted, ";\n",
      "REVOKE ALL ON ALL SEQUENCES IN SCHEMA sqlgroup FROM ", quoted, ";\n",
      // sqlgroup.enqueue (schema 6): a producer re-granted as a member
      // must not keep it.
      "REVOKE ALL ON ALL FUNCTIONS IN SCHEMA sqlgroup FROM ", quoted, ";\n");
}

absl::StatusOr<std::string> GrantSql(const std::string& kind,
                                     const std::string& role) {
  const std::string file = absl::StrCat(kind, ".sql");
  for (const MigrationSource& source : EmbeddedGrants()) {
    if (source.name == file) {
      return absl::StrReplaceAll(source.sql,
                                 {{":\"role\"", QuoteIdentifier(role)}});
    }
  }
  return absl::NotFoundError(
      absl::StrCat("no grants for '", kind, "' (sql/grants/", file, ")"));
}

}  // namespace sqlgroup::internal
