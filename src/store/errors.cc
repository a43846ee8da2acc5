#include "store/errors.h"

#include <exception>
#include <pqxx/pqxx>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "sqlgroup/item.h"

namespace sqlgroup::store {
namespace {

absl::StatusCode CodeForSqlState(const std::string& state) {
  if (state == "40001" || state == "40P01" || state == "55P03" ||
      state == "23503") {
    // Serialization failure, deadlock, lock timeout; a foreign-key failure
    // on our tables means a fenced write (the part or session is gone).
    return absl::StatusCode::kAborted;
  }
  if (state == "23505" || state == "42P04" || state == "42P06" ||
      state == "42P07" || state == "42710") {
    return absl::StatusCode::kAlreadyExists;
  }
  if (state == "23514" || state == "23502" || state == "42602" ||
      absl::StartsWith(state, "22")) {
    return absl::StatusCode::kInvalidArgument;
  }
  if (state == "42P01" || state == "3F000" || state == "42703") {
    return absl::StatusCode::kFailedPrecondition;  // schema missing or old
  }
  // What our functions raise: no such object; one still in use, or a
  // state that forbids the call (a topic no group reads).
  if (state == "42704") return absl::StatusCode::kNotFound;
  if (state == "2BP01" || state == "55006" || state == "55000") {
    return absl::StatusCode::kFailedPrecondition;
  }
  if (state == "42501" || absl::StartsWith(state, "28")) {
    return absl::StatusCode::kPermissionDenied;
  }
  if (state == "57014") return absl::StatusCode::kDeadlineExceeded;
  if (absl::StartsWith(state, "08") || absl::StartsWith(state, "57P") ||
      state == "25P03" || state == "53300" || state == "25006") {
    // 25006: a read-only server (a standby after a failover): reconnect.
    return absl::StatusCode::kUnavailable;
  }
  return absl::StatusCode::kInternal;
}

std::string Clean(const char* what) {
  std::string s(what);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

bool ServerCannotWorkNow(const std::string& state) {
  return absl::StartsWith(state, "53") || absl::StartsWith(state, "57P") ||
         absl::StartsWith(state, "58") || absl::StartsWith(state, "XX") ||
         state == "25006";
}

bool SaysNothingOfTheItem(const std::string& state) {
  return absl::StartsWith(state, "40") || state == "55P03" ||
         ServerCannotWorkNow(state);
}

absl::Status SqlErrorVerdict(const pqxx::sql_error& e,
                             const std::string& what) {
  const std::string state = SqlStateOf(e);
  if (state == kDeadLetterSqlState) return DeadLetterVerdict(PrimaryMessage(e));
  const std::string text =
      absl::StrCat(what, " failed",
                   state.empty() ? "" : absl::StrCat(" (SQLSTATE ", state, ")"),
                   ": ", PrimaryMessage(e));
  // A table, column, function or privilege the handler needs is missing:
  // no item can succeed until the schema or the grants change (the
  // member's circuit breaker counts it as an outage, not the item's fault).
  if (absl::StartsWith(state, "42") || state == "3F000") {
    return absl::FailedPreconditionError(text);
  }
  return absl::InternalError(text);
}

std::string SqlStateOf(const pqxx::sql_error& e) {
  if (!e.sqlstate().empty()) return e.sqlstate();
  // Most derived first.
  const pqxx::sql_error* p = &e;
  if (dynamic_cast<const pqxx::insufficient_privilege*>(p)) return "42501";
  if (dynamic_cast<const pqxx::undefined_table*>(p)) return "42P01";
  if (dynamic_cast<const pqxx::undefined_column*>(p)) return "42703";
  if (dynamic_cast<const pqxx::undefined_function*>(p)) return "42883";
  if (dynamic_cast<const pqxx::syntax_error*>(p)) return "42601";
  if (dynamic_cast<const pqxx::feature_not_supported*>(p)) return "0A000";
  if (dynamic_cast<const pqxx::disk_full*>(p)) return "53100";
  if (dynamic_cast<const pqxx::out_of_memory*>(p)) return "53200";
  if (dynamic_cast<const pqxx::insufficient_resources*>(p)) return "53000";
  if (dynamic_cast<const pqxx::unique_violation*>(p)) return "23505";
  if (dynamic_cast<const pqxx::foreign_key_violation*>(p)) return "23503";
  if (dynamic_cast<const pqxx::not_null_violation*>(p)) return "23502";
  if (dynamic_cast<const pqxx::check_violation*>(p)) return "23514";
  if (dynamic_cast<const pqxx::integrity_constraint_violation*>(p)) {
    return "23000";
  }
  if (dynamic_cast<const pqxx::data_exception*>(p)) return "22000";
  if (dynamic_cast<const pqxx::invalid_sql_statement_name*>(p)) {
    return "26000";
  }
  return "";
}

std::string PrimaryMessage(const pqxx::sql_error& e) {
  std::string text = e.what();
  text = text.substr(0, text.find('\n'));
  return std::string(absl::StripPrefix(text, "ERROR:  "));
}

absl::Status StatusFromCurrentException(std::string_view context) {
  const std::string prefix = std::string(context) + ": ";
  try {
    throw;
  } catch (const pqxx::broken_connection& e) {
    std::string why = Clean(e.what());
    // What libpqxx says of a connection found gone tells a person nothing.
    if (absl::StrContains(why, "client encoding") ||
        absl::StrContains(why, "not connected")) {
      why =
          "the server closed it (a restart, a failover, or its session was "
          "terminated)";
    }
    return absl::UnavailableError(
        absl::StrCat(prefix, "database connection lost: ", why));
  } catch (const pqxx::in_doubt_error&) {
    // libpqxx's text ("... except to check manually") is advice for its
    // own users, not ours.
    return absl::UnknownError(absl::StrCat(
        prefix,
        "the connection was lost during COMMIT, so whether it committed is "
        "unknown"));
  } catch (const pqxx::sql_error& e) {
    const std::string state = SqlStateOf(e);
    std::string message = absl::StrCat(prefix, Clean(e.what()));
    if (!state.empty()) absl::StrAppend(&message, " [SQLSTATE ", state, "]");
    if (state == "42501") {
      absl::StrAppend(&message,
                      "; the connection's role lacks this privilege: schema "
                      "and group changes need the role that owns the "
                      "sqlgroup schema, members the grants of `sqlgroup "
                      "grant` (docs/SECURITY.md)");
    }
    // Our own statements, prepared on this connection, gone or there
    // already: the connection's transactions run on server connections
    // that change, i.e. a pooler in transaction mode.
    if ((state == "26000" || state == "42P05") &&
        absl::StrContains(message, "\"sqlgroup_")) {
      absl::StrAppend(&message,
                      "; the connection seems to go through a pooler in "
                      "transaction mode: run with --pool_mode=transaction "
                      "(PoolMode::kTransaction), see docs/POOLERS.md");
    }
    return absl::Status(CodeForSqlState(state), message);
  } catch (const pqxx::transaction_rollback& e) {
    // libpqxx 6.4 sometimes throws these without a SQLSTATE.
    return absl::AbortedError(absl::StrCat(prefix, Clean(e.what())));
  } catch (const pqxx::usage_error& e) {
    return absl::InternalError(
        absl::StrCat(prefix, "libpqxx usage error: ", Clean(e.what())));
  } catch (const pqxx::conversion_error& e) {
    return absl::InternalError(
        absl::StrCat(prefix, "unexpected value: ", Clean(e.what())));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(prefix, Clean(e.what())));
  } catch (...) {
    return absl::InternalError(absl::StrCat(prefix, "unknown exception"));
  }
}

}  // namespace sqlgroup::store
