// What a database connection is opened with (ConnectOptions and the
// presets for each kind of connection), and what a failure to open one
// means. Names no pqxx: code outside store/ builds these (store/connection.h
// opens connections; store/db_connection.h holds one for a facade).
#ifndef SQLGROUP_STORE_CONNECT_OPTIONS_H_
#define SQLGROUP_STORE_CONNECT_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "sqlgroup/pool_mode.h"

namespace sqlgroup::store {

struct ConnectOptions {
  // Bound on reaching the server (libpq connect_timeout, whole seconds).
  absl::Duration connect_timeout = absl::Seconds(5);
  // Shown in pg_stat_activity.
  std::string application_name = "sqlgroup";
  // Server-side limits; zero leaves the server's default.
  absl::Duration statement_timeout = absl::ZeroDuration();
  absl::Duration lock_timeout = absl::ZeroDuration();
  // Ends a session whose client went quiet inside a transaction (a paused
  // process), so its row locks cannot stall the group.
  absl::Duration idle_in_transaction_timeout = absl::ZeroDuration();
  // Commits return before their WAL is flushed (synchronous_commit off).
  // For statements whose loss in a crash is harmless: a crash loses the
  // newest such commits whole, and a later durable commit that depends on
  // one (an ack under a take) flushes it first.
  bool asynchronous_commit = false;
  // The connection goes through a pooler in transaction mode (PgBouncer's
  // pool_mode = transaction): consecutive transactions may run on different
  // server connections, shared with other clients. Nothing is set for the
  // session (it would leak to them): application_name ("sqlgroup" for
  // every kind of connection) goes in the startup packet, and the limits
  // above are set with SET LOCAL in each transaction that LocalLimits is
  // called on (statements run outside a transaction run under the server's
  // defaults). Statements are prepared per server connection (see
  // store/statements.h).
  bool transaction_pooler = false;
  // Unless transaction_pooler: find out whether a pooler answers the
  // connection (the process id given at connect is not the backend's; see
  // PoolMode::kAuto). The connection opens as for a pooler, asks the
  // server its process id, and then becomes a pooled connection or is set
  // up as a direct one. TransactionPooled (store/connection.h) tells which.
  bool detect_pooler = false;
};

// transaction_pooler and detect_pooler for a connection string that
// reaches the database in `mode` (kAuto: found out on the connection).
inline void SetPoolMode(ConnectOptions& options, PoolMode mode) {
  options.transaction_pooler = mode == PoolMode::kTransaction;
  options.detect_pooler = mode == PoolMode::kAuto;
}

// How long one coordination statement (heartbeat, reap, take, drop) may
// run in a group with this session TTL: well inside it, so one blocked
// statement cannot cost a member its session.
absl::Duration CoordinationBound(absl::Duration ttl);

// Options of a connection that runs coordination statements: each bounded
// by CoordinationBound(ttl), committed asynchronously. They need no flush
// of their own: a crash that loses the newest of them loses them whole
// (the database stays the arbiter of ownership, and members reconcile with
// it on their next read), and an ack that depends on a take flushes the
// take first. It saves a WAL flush per heartbeat, per member and second.
ConnectOptions CoordinationOptions(std::string application_name,
                                   absl::Duration ttl,
                                   absl::Duration connect_timeout);

// The payload that marks a connection refused for good.
inline constexpr char kRefusedForGood[] = "sqlgroup/connect-refused-for-good";

// True for a Connect failure that retrying will not cure.
bool RefusedForGood(const absl::Status& s);

// The payload that marks a connection the server refused for now.
inline constexpr char kServerBusy[] = "sqlgroup/connect-server-busy";

// True for a Connect failure because the server takes no more connections
// for now: too many (SQLSTATE 53300, or a full PgBouncer), or it is
// starting, stopping or recovering (57P03). A condition to wait out.
bool ServerBusy(const absl::Status& s);

// True when an enqueue that failed with `s` may be tried again under its
// idempotency key: the database was out of reach (but not refused for
// good), a commit's outcome was lost, a conflict, or an id taken by
// another producer in the same microsecond.
bool EnqueueWorthRetrying(const absl::Status& s);

// Options of a producer's connection: statements and lock waits bounded,
// and a session whose client vanished inside a transaction (holding a
// batch's idempotency key uncommitted) ended by the server, so a retry
// never waits much longer than its caller's deadline.
ConnectOptions ProducerOptions(std::string application_name,
                               absl::Duration connect_timeout);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_CONNECT_OPTIONS_H_
