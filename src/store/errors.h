// The one place where pqxx exceptions become absl::Status, following
// Abseil's retry rule: UNAVAILABLE (connection broken: retry the call),
// ABORTED (serialization failure, deadlock, lock timeout, fenced write:
// retry at a higher level), UNKNOWN (commit outcome in doubt: re-read, never
// blindly retry), FAILED_PRECONDITION (schema missing or wrong: fix first),
// INVALID_ARGUMENT (a check constraint or bad value), ALREADY_EXISTS,
// PERMISSION_DENIED, DEADLINE_EXCEEDED (statement timeout).
#ifndef SQLGROUP_STORE_ERRORS_H_
#define SQLGROUP_STORE_ERRORS_H_

#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pqxx {
class sql_error;
}

namespace sqlgroup::store {

// The first line of a database error, without libpq's "ERROR:  ": the
// message a handler's statement raised, for a person.
std::string PrimaryMessage(const pqxx::sql_error& e);

// The error's SQLSTATE. libpqxx 6.4 throws some classes without it (a
// missing privilege, table or function among them): then the one their
// exception type stands for (the class's general state where the type is
// a whole class), or empty.
std::string SqlStateOf(const pqxx::sql_error& e);

// Whether an error's SQLSTATE says the server cannot work now, whatever
// was asked: short of a resource (53: disk, memory, connections), shutting
// down or not ready (57P), read-only after a failover (25006), broken (58,
// XX).
bool ServerCannotWorkNow(const std::string& sqlstate);

// Whether an error that handling an item met says nothing of the item: a
// transaction rolled back for a conflict (40: serialization failure,
// deadlock), a lock timeout (55P03), or a server that cannot work now.
// The worker retries such an item without counting an attempt (a conflict;
// part_worker.h).
bool SaysNothingOfTheItem(const std::string& sqlstate);

// The verdict on an error a handler's own SQL raised (a SQL function, the
// CLI's sql: statement), for one that does not say nothing of the item:
// SQLSTATE SGDLQ dead-letters it at once (DeadLetterVerdict, with the
// error's message), anything else fails the attempt with "<what> failed
// (SQLSTATE s): <message>": FAILED_PRECONDITION for class 42 and 3F000 (a
// missing table, column, function, schema or privilege), INTERNAL else.
absl::Status SqlErrorVerdict(const pqxx::sql_error& e, const std::string& what);

// Call only inside a catch block: maps the exception being handled.
// `context` says what was being done ("register session").
absl::Status StatusFromCurrentException(std::string_view context);

// Runs `f` and maps any exception it throws.
template <typename F>
absl::Status Guard(std::string_view context, F&& f) {
  try {
    std::forward<F>(f)();
    return absl::OkStatus();
  } catch (...) {
    return StatusFromCurrentException(context);
  }
}

// As Guard, for a function returning a value (or a StatusOr).
template <typename T, typename F>
absl::StatusOr<T> GuardOr(std::string_view context, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (...) {
    return StatusFromCurrentException(context);
  }
}

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_ERRORS_H_
