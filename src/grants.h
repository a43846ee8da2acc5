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

// sql/grants/`kind`.sql ("member", "producer") for `role`: psql's
// :"role" replaced by the quoted name. NOT_FOUND for an unknown kind.
absl::StatusOr<std::string> GrantSql(const std::string& kind,
                                     const std::string& role);

}  // namespace sqlgroup::internal

#endif  // SQLGROUP_GRANTS_H_
