#include "store/function_ack.h"

#include <unistd.h>

#include <pqxx/pqxx>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "store/claim_sql.h"
#include "store/errors.h"
#include "store/statements.h"

namespace sqlgroup::store {
namespace {

// $1 group, $2 the item's id (uuid), $3 session, $4 part, $5 epoch: a row
// when it was deleted.
constexpr char kAckInFunction[] = "sqlgroup_ack_in_function";
// $2 ids (uuid[]), the others the same: one row with their count, unless
// none was deleted.
constexpr char kAckInFunctionOnArrays[] = "sqlgroup_ack_in_function_on_arrays";

// The call of `f` on one item's columns, as the delete returns it: a
// boolean whatever the function returns, so that a function replaced by
// one of another result type does not break the prepared statements (a
// plan must not change its result type: 0A000); evaluated for every row,
// whatever the function's volatility. RETURNING refuses a function that
// returns a set.
std::string CallOnRow(const SqlFunction& f) {
  return absl::StrCat("(", f.name, "(key, payload, id) IS NULL)");
}

std::string AckInFunctionSql(const SqlFunction& f) {
  return AckDeleteReturning(WithId(2), 3, 4, 5, CallOnRow(f));
}

std::string AckInFunctionOnArraysSql(const SqlFunction& f) {
  // One call on the rows deleted, in key order; none when nothing was
  // (the take is gone). The call is in the outermost select list, which
  // the client reads, so it runs whatever its volatility; CASE refuses a
  // function that returns a set.
  return absl::StrCat(
      "WITH acked AS (",
      AckDeleteReturning(WithIds(2), 3, 4, 5, "id, key, payload"),
      ") SELECT a.n, (CASE WHEN a.n > 0 THEN ", f.name,
      "(a.keys, a.payloads, a.ids) END) IS NULL FROM (SELECT count(*) AS n, "
      "array_agg(key ORDER BY id) AS keys, "
      "array_agg(payload ORDER BY id) AS payloads, "
      "array_agg(id ORDER BY id) AS ids FROM acked) a WHERE a.n > 0");
}

// $1..$6 as in NextOfKeySql: AckAndNextOfKey's statement, the delete of
// the item $5 returning the function's call.
constexpr char kAckInFunctionAndNextOfKey[] =
    "sqlgroup_ack_in_function_and_next_of_key";
std::string AckInFunctionAndNextOfKeySql(const SqlFunction& f, bool pauses) {
  return AckThen(WithId(5), NextOfKeySql(pauses), CallOnRow(f));
}

}  // namespace

FunctionTraits FunctionTraitsOf(pqxx::transaction_base& tx,
                                const SqlFunction& function) {
  // The function the call resolves to when one takes exactly the types it
  // gets (to_regprocedure folds and finds the name as PostgreSQL does);
  // else every function of that name, in its schema or on the search_path,
  // that three arguments can call (one the call reaches through implicit
  // casts or defaults). Names fold to lower case as ASCII, as PostgreSQL
  // folds unquoted identifiers, whatever the database's collation.
  const std::string types =
      function.arrays ? "(text[],bytea[],uuid[])" : "(text,bytea,uuid)";
  const size_t dot = function.name.find('.');
  const std::string folded = absl::AsciiStrToLower(function.name);
  const pqxx::row r = tx.exec_params1(
      "SELECT coalesce(bool_or(p.proretset), false), "
      "  coalesce(bool_or(p.proisstrict), false) FROM pg_proc p "
      "WHERE CASE WHEN to_regprocedure($1 || $2) IS NOT NULL "
      "  THEN p.oid = to_regprocedure($1 || $2) "
      "  ELSE p.proname = $4 "
      "    AND p.pronargs - p.pronargdefaults <= 3 "
      "    AND (p.pronargs >= 3 OR p.provariadic <> 0) "
      "    AND CASE WHEN $3 = '' THEN pg_function_is_visible(p.oid) "
      "      ELSE p.pronamespace = to_regnamespace($3) END END",
      function.name, types,
      dot == std::string::npos ? "" : folded.substr(0, dot),
      dot == std::string::npos ? folded : folded.substr(dot + 1));
  return {.returns_set = r[0].as<bool>(), .strict = r[1].as<bool>()};
}

std::string StrictRefusal(const std::string& name) {
  return absl::StrCat(
      name,
      " is STRICT (RETURNS NULL ON NULL INPUT): PostgreSQL would skip the "
      "call for an item without a key, and the item would be acknowledged "
      "without it. Declare it CALLED ON NULL INPUT (ALTER FUNCTION ",
      name,
      "(text, bytea, uuid) CALLED ON NULL INPUT) and test the key "
      "yourself");
}

bool IsFunctionName(const std::string& name) {
  static const std::regex kFunctionName(
      R"(^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$)");
  return std::regex_match(name, kFunctionName);
}

void PrepareFunctionAcks(pqxx::connection& conn, const SqlFunction& function,
                         bool pauses) {
  if (function.arrays) {
    Prepare(conn, kAckInFunctionOnArrays, AckInFunctionOnArraysSql(function));
    return;
  }
  Prepare(conn, kAckInFunction, AckInFunctionSql(function));
  Prepare(conn, kAckInFunctionAndNextOfKey,
          AckInFunctionAndNextOfKeySql(function, pauses));
}

int64_t AckInFunction(pqxx::connection& conn, const ClaimRef& ref,
                      const std::string& id) {
  pqxx::nontransaction tx(conn);
  return static_cast<int64_t>(ExecPrepared(tx, kAckInFunction, ref.group, id,
                                           ref.session, ref.part, ref.epoch)
                                  .size());
}

std::string ExecuteAckInFunction(pqxx::connection& conn, const ClaimRef& ref,
                                 const std::string& id) {
  // Prepared lazily (libpqxx): by name on the server only once run.
  conn.prepare_now(kAckInFunction);
  return absl::StrCat("EXECUTE ", kAckInFunction, "(", conn.quote(ref.group),
                      ", ", conn.quote(id), ", ", conn.quote(ref.session), ", ",
                      ref.part, ", ", ref.epoch, ")");
}

int64_t AckInFunctionOnArrays(pqxx::connection& conn, const ClaimRef& ref,
                              const std::vector<std::string>& ids) {
  pqxx::nontransaction tx(conn);
  const pqxx::result r =
      ExecPrepared(tx, kAckInFunctionOnArrays, ref.group, KeyOrderedIds(ids),
                   ref.session, ref.part, ref.epoch);
  return r.empty() ? 0 : r[0][0].as<int64_t>();
}

AckedAndClaimed AckInFunctionAndNextOfKey(pqxx::connection& conn,
                                          const ClaimRef& ref,
                                          const std::string& id) {
  pqxx::nontransaction tx(conn);
  const pqxx::result r =
      ExecPrepared(tx, kAckInFunctionAndNextOfKey, ref.group, ref.session,
                   ref.part, ref.epoch, id, BlockLastOf(id));
  return {r.empty() ? 0 : r[0][0].as<int64_t>(), ClaimedItems(r, 1, ref)};
}

absl::Status CheckSqlFunction(pqxx::connection& conn,
                              const SqlFunction& function) {
  const std::string what = absl::StrCat(
      "sql_function ", function.name, ": it is called as ", function.name,
      function.arrays ? "(text[], bytea[], uuid[])"
                      : "(key text, payload bytea, id uuid)",
      " in the statement that acknowledges ",
      function.arrays ? "a batch" : "an item", ", and ");
  // A name of its own: through a pooler in transaction mode the server
  // connection, and a statement a failed check left on it, are shared.
  const std::string check =
      absl::StrCat("sqlgroup_function_check_", getpid(), "_",
                   absl::ToUnixMicros(absl::Now()) % 1000000000);
  try {
    pqxx::work tx(conn);
    tx.exec(absl::StrCat("PREPARE ", check, " AS ",
                         function.arrays ? AckInFunctionOnArraysSql(function)
                                         : AckInFunctionSql(function)));
    // Parsing resolved the function for those argument types; planning
    // checks the rest (EXECUTE on it). Nothing runs.
    tx.exec(absl::StrCat("EXPLAIN EXECUTE ", check,
                         "(NULL, NULL, NULL, NULL, NULL)"));
    tx.exec(absl::StrCat("DEALLOCATE ", check));
    // PostgreSQL skips a STRICT function's call when an argument is NULL,
    // an unkeyed item's key say: the item would be acknowledged without
    // it. (Arrays are never NULL.)
    if (!function.arrays && FunctionTraitsOf(tx, function).strict) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "yet ", StrictRefusal(function.name)));
    }
    tx.commit();
  } catch (const pqxx::broken_connection&) {
    return absl::UnavailableError(absl::StrCat(
        "lost the connection while checking sql_function ", function.name,
        "; check that the database is up and try again"));
  } catch (const pqxx::insufficient_privilege& e) {
    // (libpqxx 6.4 leaves this class's SQLSTATE empty: caught by type.)
    return absl::InvalidArgumentError(absl::StrCat(
        what, "the member's role may not call it: ", PrimaryMessage(e),
        ". Grant EXECUTE on it (and USAGE on its schema), or see "
        "docs/HANDLERS.md"));
  } catch (const pqxx::sql_error& e) {
    // Nothing said of the function (a conflict, a lock or statement
    // timeout, a server that cannot work now): worth trying again.
    if (SaysNothingOfTheItem(SqlStateOf(e)) || SqlStateOf(e) == "57014") {
      return absl::UnavailableError(
          absl::StrCat("could not check sql_function ", function.name, ": ",
                       PrimaryMessage(e), " (SQLSTATE ", SqlStateOf(e),
                       "); try again when the database can take work"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        what, "the database refused that: ", PrimaryMessage(e),
        ". Give a function that takes those types (or types they cast to "
        "implicitly) and returns one value or void, not a set"));
  }
  return absl::OkStatus();
}

}  // namespace sqlgroup::store
