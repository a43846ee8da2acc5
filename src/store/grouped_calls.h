// A SQL function's calls grouped into one transaction (issue 43): the
// statement that acknowledges an item and calls the function on it
// (AckInFunction's fenced delete) runs under a savepoint of a transaction
// left open for the calls that follow, and one COMMIT makes them all
// durable, instead of a commit per item. The deletes and the function's
// writes still commit together, so each item is handled exactly once: a
// transaction lost (a broken connection, a crash) takes every call in it,
// and their items are read again, none of their work kept. A call whose
// function raises is rolled back to its savepoint alone; the others stay.
//
// One round trip a call: RELEASE of the last call's savepoint (BEGIN for
// the first), SAVEPOINT and the prepared statement by SQL EXECUTE, in one
// query. Only on a direct connection: behind a pooler in transaction mode
// statements are prepared per server connection (store/statements.h).
//
// Thread safety: one worker thread, as the connection.
#ifndef SQLGROUP_STORE_GROUPED_CALLS_H_
#define SQLGROUP_STORE_GROUPED_CALLS_H_

#include <optional>
#include <pqxx/connection>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/model.h"

namespace sqlgroup::store {

class GroupedCalls {
 public:
  // `function`: the group's SQL function of single items, whose statement
  // PrepareFunctionAcks prepared on every connection this is given.
  explicit GroupedCalls(std::string function)
      : function_(std::move(function)) {}

  // Whether calls may be grouped on `conn`: a direct connection.
  static bool Possible(pqxx::connection& conn);

  // The function on the item `id` under the take `ref`, in the open
  // transaction (begun by the first call). Returns whether the fenced
  // delete deleted the item (false: the take is gone, the function not
  // called). Errors as ItemAcks::AckInFunction's (the function's own are
  // its verdict, and undo only this call); UNAVAILABLE when the
  // connection broke, or the transaction can no longer commit (every call
  // in it lost); CANCELLED, the call not made, when the transaction is
  // open on another connection, one dropped since (its calls are lost:
  // the next call begins anew).
  absl::StatusOr<bool> Call(pqxx::connection& conn, const ClaimRef& ref,
                            const std::string& id);
  // Commits the calls made since the transaction began. OK: each call
  // that deleted its item is acknowledged, its work kept. UNAVAILABLE:
  // lost before the COMMIT (a broken connection, or a transaction that
  // had failed); CANCELLED: `conn` is not the transaction's (it went with
  // its connection); UNKNOWN: the connection broke during it (in doubt);
  // another code: the COMMIT failed (a deferred constraint): nothing of
  // the calls was kept. OK at once when no transaction is open.
  absl::Status Commit(pqxx::connection& conn);
  // The open transaction went with its connection: forget it.
  void Forget() { open_.reset(); }
  bool open() const { return open_.has_value(); }

 private:
  // The transaction open on a connection: which (its backend, so that a
  // connection opened since at the same address is told apart).
  struct Open {
    const pqxx::connection* conn;
    int backend;
  };
  bool Mine(pqxx::connection& conn) const;

  const std::string function_;
  std::optional<Open> open_;
};

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_GROUPED_CALLS_H_
