// What an Admin holds (admin.cc; admin_operations.cc has the operations on
// items): its connection.
#ifndef SQLGROUP_ADMIN_IMPL_H_
#define SQLGROUP_ADMIN_IMPL_H_

#include <optional>

#include "sqlgroup/admin.h"
#include "store/db_connection.h"

namespace sqlgroup {

struct Admin::Impl {
  std::optional<store::DbConnection> conn;  // set by Connect
};

}  // namespace sqlgroup

#endif  // SQLGROUP_ADMIN_IMPL_H_
