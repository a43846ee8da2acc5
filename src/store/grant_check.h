// Why a group a role asked for is not there: missing, or hidden from the
// role because it is not granted that group (row-level security, schema
// 19, shows a role only the rows of its groups).
#ifndef SQLGROUP_STORE_GRANT_CHECK_H_
#define SQLGROUP_STORE_GRANT_CHECK_H_

#include <pqxx/connection>
#include <string>

#include "absl/status/status.h"
#include "store/db_connection.h"

namespace sqlgroup::store {

// `not_found` (the caller's NOT_FOUND for `group`), unless the connection's
// role may not act as `kind` ("member", "producer", "operator") on the
// group: then PERMISSION_DENIED, the sentence of sqlgroup.require_grant
// naming the role and the `sqlgroup grant` command. Before schema 19, or
// when the role may not ask, `not_found` as it is.
absl::Status MissingOrNotGranted(pqxx::connection& conn,
                                 const std::string& kind,
                                 const std::string& group,
                                 const absl::Status& not_found);
absl::Status MissingOrNotGranted(DbConnection& db, const std::string& kind,
                                 const std::string& group,
                                 const absl::Status& not_found);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_GRANT_CHECK_H_
