// What a worker's handler is, as the statements it needs see it: which
// ack and claim statements to prepare and warm up, and how the settler
// acknowledges its items.
#ifndef SQLGROUP_MEMBER_HANDLER_KIND_H_
#define SQLGROUP_MEMBER_HANDLER_KIND_H_

#include "sqlgroup/item.h"

namespace sqlgroup {

struct HandlerKind {
  // A BatchHandler, or a SQL function on arrays: items in batches.
  bool batched = false;
  // The handler is a SQL function that the ack's statement calls.
  SqlFunction sql_function;
  bool in_function() const { return !sql_function.name.empty(); }
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_HANDLER_KIND_H_
