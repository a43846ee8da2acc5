// Statements run many times on one connection, with or without a
// connection pooler in transaction mode in front of the database.
//
// On a direct (or session-pooled) connection a statement is prepared once,
// by name, and run by name: parsed and planned once (PrepareItemStatements
// makes the plans generic). Through a pooler in transaction mode (PgBouncer
// before 1.21, which Debian 12 ships) a statement prepared in one
// transaction may be run by the next on another server connection, where
// it does not exist. A connection opened for such a pooler
// (ConnectOptions::transaction_pooler) keeps the statements' text on the
// client and prepares each with SQL PREPARE on whichever server connection
// its transaction gets, the first time it runs there: a statement run
// outside a transaction is sent as EXECUTE, and prepared then run in one
// round trip when the server connection lacks it (26000); inside a
// transaction the server connection's statements were listed when the
// transaction began (LocalLimits, in the same round trip as its limits).
// The name holds a hash of the text, so a name found is this statement.
// Plans then stay cached per server connection, generic under the member
// role's plan_cache_mode = force_generic_plan (docs/POOLERS.md).
#ifndef SQLGROUP_STORE_STATEMENTS_H_
#define SQLGROUP_STORE_STATEMENTS_H_

#include <map>
#include <pqxx/connection>
#include <pqxx/transaction_base>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sqlgroup::store {

// What a connection through a pooler in transaction mode keeps on the
// client instead of in its (shared) server session. Attached to the
// connection for its life (see MarkPooled).
struct PooledStatement {
  std::string sql;          // its text, sent unnamed where not prepared
  std::string server_name;  // NameOnServer
  std::string prepare;      // "PREPARE <server_name> AS <sql>"
};

struct PooledState {
  // Name -> the statements "prepared" on the connection (computed once:
  // the hash of a statement's text is not taken per execution).
  std::map<std::string, PooledStatement> statements;
  // SET LOCAL statements of the connection's limits (LocalLimits).
  std::string local_limits;
  // The transaction whose server connection's statements were listed
  // (LocalLimits) and what it has, by the names of NameOnServer.
  const void* listed_tx = nullptr;
  std::set<std::string> on_server;
};

// The name statement `name` with text `sql` is prepared under on a server
// connection behind a pooler: the name and a hash of the text.
std::string NameOnServer(const std::string& name, const std::string& sql);

// The statement that lists the statements prepared on the server
// connection (LocalLimits); and reading its result into `state`.
extern const char kListPrepared[];
void NoteListed(PooledState& state, const void* tx, const pqxx::result& r);

// Whether statements of `tx` on its pooled connection may be prepared on
// its server connection: outside a transaction, or in one whose server
// connection's statements were listed. Otherwise they are sent unnamed.
bool CanPrepare(pqxx::transaction_base& tx, const PooledState& state);

// Runs `call` (EXECUTE of the statement prepared as `server_name`) on tx's
// pooled connection, running `prepare` (its PREPARE) first, in the same
// round trip, where the server connection lacks it. Only where CanPrepare.
pqxx::result ExecPooled(pqxx::transaction_base& tx, PooledState& state,
                        const std::string& server_name,
                        const std::string& prepare, const std::string& call);

// Marks `conn`, just opened, as going through a pooler in transaction
// mode; a connection opened since at the same address as an earlier one
// that was marked is not (Unmark, called by Connect).
PooledState& MarkPooled(pqxx::connection& conn);
void Unmark(pqxx::connection& conn);

// The state of a connection marked pooled; null for any other.
PooledState* PooledStateOf(const pqxx::connection_base& conn);

// Whether `conn` goes through a pooler in transaction mode: every
// transaction may run on another server connection.
inline bool Pooled(const pqxx::connection_base& conn) {
  return PooledStateOf(conn) != nullptr;
}

// Prepares `sql` as `name` on `conn` (lazily, as libpqxx does: no round
// trip here), or notes its text on a pooled connection.
void Prepare(pqxx::connection& conn, const std::string& name,
             const std::string& sql);

// Runs the statement prepared as `name` on tx's connection.
template <typename... Args>
pqxx::result ExecPrepared(pqxx::transaction_base& tx, const std::string& name,
                          Args&&... args) {
  if (PooledState* pooled = PooledStateOf(tx.conn())) {
    const PooledStatement& st = pooled->statements.at(name);
    if (!CanPrepare(tx, *pooled)) {
      return tx.exec_params(st.sql, std::forward<Args>(args)...);
    }
    std::string call = absl::StrCat("EXECUTE ", st.server_name, "(");
    bool first = true;
    ((absl::StrAppend(&call, first ? "" : ", ", tx.quote(args)), first = false),
     ...);
    call += ")";
    return ExecPooled(tx, *pooled, st.server_name, st.prepare, call);
  }
  return tx.exec_prepared(name, std::forward<Args>(args)...);
}

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_STATEMENTS_H_
