// How a connection string reaches PostgreSQL: straight (or through a pooler
// in session mode, which keeps a server connection per client), or through
// a pooler in transaction mode (PgBouncer's pool_mode = transaction, RDS
// Proxy, Supavisor, pgcat), which lends one per transaction, so nothing may
// rely on session state (docs/POOLERS.md).
#ifndef SQLGROUP_POOL_MODE_H_
#define SQLGROUP_POOL_MODE_H_

namespace sqlgroup {

enum class PoolMode {
  // Found out on the first connection: a pooler answers the connection
  // itself, so the process id the server gives at connect (BackendKeyData)
  // is not that of the backend that runs the statements. Then as
  // kTransaction, said once in the log; else as kDirect. One query, once
  // per Create. A pooler in session mode is seen as a pooler too (it looks
  // the same): everything works, but without LISTEN; give kDirect for it.
  kAuto,
  // No pooler, or one in session mode: named prepared statements, session
  // settings, LISTEN on the control connection.
  kDirect,
  // A pooler in transaction mode: no state kept in the server session;
  // LISTEN only on a separate connection string, else polling.
  kTransaction,
};

}  // namespace sqlgroup

#endif  // SQLGROUP_POOL_MODE_H_
