// Debian's Abseil 20220623 ships no status macros; these are ours.
#ifndef SQLGROUP_STATUS_MACROS_H_
#define SQLGROUP_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SQLGROUP_CONCAT_INNER_(a, b) a##b
#define SQLGROUP_CONCAT_(a, b) SQLGROUP_CONCAT_INNER_(a, b)

// Returns the status of `expr` from the current function unless it is OK.
#define RETURN_IF_ERROR(expr)                            \
  do {                                                   \
    ::absl::Status sqlgroup_status_ = (expr);            \
    if (!sqlgroup_status_.ok()) return sqlgroup_status_; \
  } while (0)

// `lhs = value of expr`, or returns its error status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(SQLGROUP_CONCAT_(sqlgroup_or_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // SQLGROUP_STATUS_MACROS_H_
