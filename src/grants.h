// The least-privilege grants of sql/grants/ (member.sql, producer.sql),
// compiled in, and the SQL that applies them to a role. Pure text; running
// it is Admin::GrantRoles' job.
#ifndef SQLGROUP_GRANTS_H_
#define SQLGROUP_GRANTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "migrations.h"

namespace sqlgroup::internal {

// The files of sql/grants/ at build time, by name (generated code).
const std::vector<MigrationSource>& EmbeddedGrants();

// `role` as a quoted SQL identifier: "name", with " doubled.
std::string QuoteIdentifier(const std::string& role);

// The statements that take every privilege `role` has on the sqlgroup
// schema's tables and sequences away, so that what follows is all it has.
std::string RevokeAllSql(const std::string& role);

// Every group, as a pattern of `sqlgroup grant --group`.
inline constexpr char kEveryGroup[] = "*";

// INVALID_ARGUMENT, a sentence, unless `pattern` is a group name or a
// pattern of one whose * stands for any characters (as
// sqlgroup.group_grants accepts).
absl::Status CheckGroupPattern(const std::string& pattern);

// The same for a topic name or pattern of `--topic`.
absl::Status CheckTopicPattern(const std::string& pattern);

// The statement that drops the policies the sqlgroup schema's row-level
// security has for `role` (schema 19) of every kind but `keep` ("member",
// "producer", "operator"): those the grant writes next, which leaves them
// as they are when its groups did not change (policies are DDL and lock
// their tables). With RevokeAllSql, the role is left with nothing else.
std::string DropPoliciesSql(const std::string& role,
                            const std::vector<std::string>& keep);

// sql/grants/`kind`.sql ("member", "producer", "operator") for `role` and
// the groups `patterns` (empty: every group): psql's :"role" replaced by
// the quoted name, :'role' by it as a literal, :'groups' by the patterns
// as a text[] literal, and :'topics' (a producer's) by `topics` (empty:
// none). NOT_FOUND for an unknown kind.
absl::StatusOr<std::string> GrantSql(
    const std::string& kind, const std::string& role,
    const std::vector<std::string>& patterns,
    const std::vector<std::string>& topics = {});

}  // namespace sqlgroup::internal

#endif  // SQLGROUP_GRANTS_H_
