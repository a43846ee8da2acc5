// A permission refusal said for a person: which role was refused and the
// `sqlgroup grant` command that allows it.
#ifndef SQLGROUP_GRANT_HINT_H_
#define SQLGROUP_GRANT_HINT_H_

#include <string>

#include "absl/status/status.h"

namespace sqlgroup::internal {

// `s` unchanged unless PERMISSION_DENIED without a `sqlgroup grant`
// command in it: then with a sentence naming the role `dsn` logs in as and
// `sqlgroup grant --<kind>_role ROLE` (kind: "member", "producer"), which
// the schema's owner runs; with `--group GROUP` when a group is given (the
// role may be scoped to other groups, schema 19).
absl::Status WithGrantHint(const absl::Status& s, const std::string& dsn,
                           const std::string& kind,
                           const std::string& group = "");

}  // namespace sqlgroup::internal

#endif  // SQLGROUP_GRANT_HINT_H_
