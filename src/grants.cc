#include "grants.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace sqlgroup::internal {

std::string QuoteIdentifier(const std::string& role) {
  return absl::StrCat("\"", absl::StrReplaceAll(role, {{"\"", "\"\""}}), "\"");
}

namespace {
// `text` as a quoted SQL literal (standard_conforming_strings: ' doubled).
std::string QuoteLiteral(const std::string& text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "''"}}), "'");
}
}  // namespace

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

namespace {
// `what`: "group" or "topic", as its flag and sentence name it.
absl::Status CheckPattern(const std::string& pattern, const std::string& what) {
  const auto allowed = [](char c, bool first) {
    return absl::ascii_isalnum(c) || c == '*' ||
           (!first && (c == '_' || c == '.' || c == '-'));
  };
  bool valid = !pattern.empty() && pattern.size() <= 128;
  for (size_t i = 0; valid && i < pattern.size(); ++i) {
    valid = allowed(pattern[i], i == 0);
  }
  if (valid) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--", what, " '", pattern, "' is neither a ", what,
      " name nor a pattern of one: letters, digits, '_', '.', '-' and '*' "
      "(any characters), starting with a letter, a digit or '*', at most "
      "128 characters; '*' alone is every ",
      what));
}
}  // namespace

absl::Status CheckGroupPattern(const std::string& pattern) {
  return CheckPattern(pattern, "group");
}

absl::Status CheckTopicPattern(const std::string& pattern) {
  return CheckPattern(pattern, "topic");
}

std::string DropPoliciesSql(const std::string& role,
                            const std::vector<std::string>& keep) {
  std::vector<std::string> drop;
  for (const char* kind : {"member", "producer", "operator"}) {
    if (std::find(keep.begin(), keep.end(), kind) == keep.end()) {
      drop.push_back(absl::StrCat("'", kind, "'"));
    }
  }
  if (drop.empty()) return "";
  return absl::StrCat("SELECT sqlgroup.grant_groups(k, ", QuoteLiteral(role),
                      ", NULL) FROM unnest(ARRAY[", absl::StrJoin(drop, ", "),
                      "]) k;\n");
}

absl::StatusOr<std::string> GrantSql(const std::string& kind,
                                     const std::string& role,
                                     const std::vector<std::string>& patterns,
                                     const std::vector<std::string>& topics) {
  const std::string file = absl::StrCat(kind, ".sql");
  // Each element in double quotes: a group named null is no NULL. Patterns
  // hold no quote, backslash, comma or brace (CheckGroupPattern).
  const auto array = [](const std::vector<std::string>& elements) {
    return QuoteLiteral(
        absl::StrCat("{",
                     absl::StrJoin(elements, ",",
                                   [](std::string* out, const std::string& p) {
                                     absl::StrAppend(out, "\"", p, "\"");
                                   }),
                     "}"));
  };
  const std::vector<std::string> every = {kEveryGroup};
  const std::string groups = array(patterns.empty() ? every : patterns);
  for (const MigrationSource& source : EmbeddedGrants()) {
    if (source.name == file) {
      return absl::StrReplaceAll(source.sql,
                                 {{":\"role\"", QuoteIdentifier(role)},
                                  {":'role'", QuoteLiteral(role)},
                                  {":'groups'", groups},
                                  {":'topics'", array(topics)}});
    }
  }
  return absl::NotFoundError(
      absl::StrCat("no grants for '", kind, "' (sql/grants/", file, ")"));
}

}  // namespace sqlgroup::internal
