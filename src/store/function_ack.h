// A handler that is a SQL function (sqlgroup::SqlFunction), called in the
// statement that acknowledges its items: the fenced delete returns the
// function's call for each row it deletes (or, for a batch, one call on
// arrays of the rows it deleted), so the function's writes and the ack
// commit together, in one autocommit statement and one round trip, and the
// function runs only on items the fence lets go.
#ifndef SQLGROUP_STORE_FUNCTION_ACK_H_
#define SQLGROUP_STORE_FUNCTION_ACK_H_

#include <pqxx/connection>
#include <pqxx/transaction_base>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sqlgroup/item.h"
#include "store/item_store.h"

namespace sqlgroup::store {

// What the function the call of `function` resolves to is declared as
// (when no overload takes exactly its argument types: any the call could
// reach).
struct FunctionTraits {
  bool returns_set = false;  // SETOF or TABLE
  bool strict = false;       // RETURNS NULL ON NULL INPUT
};
FunctionTraits FunctionTraitsOf(pqxx::transaction_base& tx,
                                const SqlFunction& function);

// Why a STRICT function of single items is refused, and what to do: a
// sentence that starts with `name`.
std::string StrictRefusal(const std::string& name);

// Whether `name` names a function as SqlFunction takes it: name or
// schema.name, each of letters, digits, '_' and '$', not starting with a
// digit.
bool IsFunctionName(const std::string& name);

// Prepares the statements below for `function` on `conn` (lazily, as
// PrepareItemStatements does, after it): AckInFunctionOnArrays's for a
// function on arrays, the other two's for a function of single items.
// `pauses` as for PrepareItemStatements (the read of a key's next item
// enforces them).
void PrepareFunctionAcks(pqxx::connection& conn, const SqlFunction& function,
                         bool pauses);

// The fenced delete of the item `id` (DeleteClaimedNow), calling the
// function of single items on it if it deletes it, in autocommit. Returns
// how many it deleted (0 or 1): one deleted was handled once and is
// acknowledged for good. An error the function raised undoes the
// statement and is thrown (a pqxx::sql_error with its SQLSTATE), as are
// the store's own.
int64_t AckInFunction(pqxx::connection& conn, const ClaimRef& ref,
                      const std::string& id);

// AckInFunction's statement, to be run in a query of several (SQL
// EXECUTE of its prepared statement, prepared on `conn` now if it was
// not yet): the same delete and call, returning a row if it deleted the
// item. Not behind a pooler in transaction mode. store/grouped_calls.h.
std::string ExecuteAckInFunction(pqxx::connection& conn, const ClaimRef& ref,
                                 const std::string& id);

// The same for a function on arrays (SqlFunction::arrays) and the items
// `ids`: one call on the arrays of those it deletes, none when it deletes
// none.
int64_t AckInFunctionOnArrays(pqxx::connection& conn, const ClaimRef& ref,
                              const std::vector<std::string>& ids);

// The same for one item, and the read of its key's next item in the same
// statement (AckAndNextOfKey). Not for a function on arrays.
AckedAndClaimed AckInFunctionAndNextOfKey(pqxx::connection& conn,
                                          const ClaimRef& ref,
                                          const std::string& id);

// Prepares and plans the statements of `function` without running them:
// INVALID_ARGUMENT saying what to change when the database refuses them (no
// such function for those arguments, one that returns a set, a role that
// may not call it) or when the function is STRICT (single items: it would
// be skipped for a NULL key); UNAVAILABLE when the database cannot be
// reached.
absl::Status CheckSqlFunction(pqxx::connection& conn,
                              const SqlFunction& function);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_FUNCTION_ACK_H_
