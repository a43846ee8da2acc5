// Statements run many times on one connection, with or without a
// connection pooler in transaction mode in front of the database.
//
// On a direct (or session-pooled) connection a statement is prepared once,
// by name, and run by name: parsed and planned once (PrepareItemStatements
// makes the plans generic). Through a pooler in transaction mode (PgBouncer
// before 1.21, which Debian 12 ships) a statement prepared in one
// transaction may be run by the next on another server connection, where
// it does not exist; a connection opened for such a pooler
// (ConnectOptions::transaction_pooler) keeps the statements' text on the
// client and sends each unnamed, parse, bind and execute in one round trip.
#ifndef SQLGROUP_STORE_STATEMENTS_H_
#define SQLGROUP_STORE_STATEMENTS_H_

#include <map>
#include <pqxx/connection>
#include <pqxx/transaction_base>
#include <string>
#include <utility>

namespace sqlgroup::store {

// What a connection through a pooler in transaction mode keeps on the
// client instead of in its (shared) server session. Attached to the
// connection for its life (see MarkPooled).
struct PooledState {
  // Name -> text of the statements "prepared" on the connection.
  std::map<std::string, std::string> statements;
  // SET LOCAL statements of the connection's limits (LocalLimits).
  std::string local_limits;
};

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
    return tx.exec_params(pooled->statements.at(name),
                          std::forward<Args>(args)...);
  }
  return tx.exec_prepared(name, std::forward<Args>(args)...);
}

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_STATEMENTS_H_
