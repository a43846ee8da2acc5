// What `group describe` shows of a group, read on a facade's connection
// in one snapshot so that members, owners and lag agree with each other.
// Names no pqxx.
#ifndef SQLGROUP_STORE_DESCRIBE_STORE_H_
#define SQLGROUP_STORE_DESCRIBE_STORE_H_

#include "absl/status/statusor.h"
#include "schema_skew.h"
#include "sqlgroup/admin.h"
#include "store/db_connection.h"

namespace sqlgroup::store {

// The group `config` describes (as just read): its members, the last
// change of its part count, every part's key range, owner, epoch and
// hand-over, its blocked keys (key-ordered groups), its dead items, and,
// with `count_lag`, each part's waiting items and the oldest one's age
// (O(items): it reads the group's items index).
// `schema` is the database's (members' versions are read from schema 14).
absl::StatusOr<GroupDescription> DescribeGroup(
    DbConnection& db, const GroupConfig& config, bool count_lag,
    const internal::SchemaState& schema);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_DESCRIBE_STORE_H_
