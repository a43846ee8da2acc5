#include "store/grouped_calls.h"

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/function_ack.h"
#include "store/pg_item_acks.h"

namespace sqlgroup::store {
namespace {

constexpr char kSavepoint[] = "sqlgroup_call";

// SQLSTATEs that say the open transaction is not as the calls left it (in
// a failed state, without the savepoint, or gone): none of its calls can
// be trusted to commit.
bool TransactionStateError(const std::string& state) {
  return state == "25P02" || state == "25P01" || state == "3B001";
}

}  // namespace

bool GroupedCalls::Possible(pqxx::connection& conn) {
  return !TransactionPooled(conn);
}

bool GroupedCalls::Mine(pqxx::connection& conn) const {
  return open_ && open_->conn == &conn && conn.is_open() &&
         conn.backendpid() == open_->backend;
}

absl::StatusOr<bool> GroupedCalls::Call(pqxx::connection& conn,
                                        const ClaimRef& ref,
                                        const std::string& id) {
  if (open_ && !Mine(conn)) {
    // Not the connection the transaction is open on: its calls are lost
    // (the caller settles them as such before the next call).
    open_.reset();
    return absl::CancelledError(
        "the transaction of the calls grouped before went with its "
        "connection");
  }
  std::string call;
  try {
    // Prepared by the group's first call, before its BEGIN: a statement
    // that fails to prepare inside the transaction would abort it.
    call = ExecuteAckInFunction(conn, ref, id);
  } catch (...) {
    const absl::Status error = AckErrorOfCurrentException(function_);
    if (!open_) return error;
    open_.reset();
    return absl::UnavailableError(
        absl::StrCat("grouped calls: ", error.message()));
  }
  try {
    // One round trip: the last call's savepoint released (or the
    // transaction begun), this call's set, and the call.
    const std::string query = absl::StrCat(
        open_ ? absl::StrCat("RELEASE SAVEPOINT ", kSavepoint) : "BEGIN",
        "; SAVEPOINT ", kSavepoint, "; ", call);
    pqxx::nontransaction tx(conn);
    // Open from here on: BEGIN may have run even if the call fails.
    if (!open_) open_ = Open{&conn, conn.backendpid()};
    return tx.exec(query).size() == 1;
  } catch (const pqxx::broken_connection&) {
    open_.reset();
    return AckErrorOfCurrentException(function_);
  } catch (const pqxx::sql_error&) {
    const absl::Status error = AckErrorOfCurrentException(function_);
    try {
      // Only this call undone; the transaction goes on. (Whatever the
      // SQLSTATE: a function may raise any.)
      pqxx::nontransaction(conn).exec(
          absl::StrCat("ROLLBACK TO SAVEPOINT ", kSavepoint));
      return error;
    } catch (const std::exception& rollback) {
      // The transaction is in no state to commit: the caller drops the
      // connection, and with it the transaction and every call in it.
      open_.reset();
      return absl::UnavailableError(
          absl::StrCat("grouped calls: could not undo a failed call (",
                       rollback.what(), ") after: ", error.message()));
    }
  } catch (const std::exception& e) {
    // Neither the server's nor the connection's: in no known state.
    open_.reset();
    return absl::UnavailableError(absl::StrCat("grouped calls: ", e.what()));
  }
}

absl::Status GroupedCalls::Commit(pqxx::connection& conn) {
  if (!open_) return absl::OkStatus();
  if (!Mine(conn)) {
    open_.reset();
    return absl::CancelledError(
        "the transaction of the grouped calls went with its connection");
  }
  open_.reset();
  try {
    // The RELEASE fails if the transaction failed, where a COMMIT would
    // only end it in a ROLLBACK, without an error.
    pqxx::nontransaction(conn).exec(
        absl::StrCat("RELEASE SAVEPOINT ", kSavepoint, "; COMMIT"));
    return absl::OkStatus();
  } catch (const pqxx::sql_error& e) {
    if (!TransactionStateError(SqlStateOf(e))) {
      return AckErrorOfCurrentException("");  // the COMMIT refused
    }
    return absl::UnavailableError(absl::StrCat(
        "the transaction of the grouped calls failed: ", e.what()));
  } catch (const pqxx::broken_connection&) {
    return absl::UnknownError(
        "commit outcome unknown: the connection broke during the COMMIT of "
        "grouped calls");
  } catch (...) {
    return AckErrorOfCurrentException("");
  }
}

}  // namespace sqlgroup::store
