// Opening database connections. A pqxx::connection belongs to one thread.
#ifndef SQLGROUP_STORE_CONNECTION_H_
#define SQLGROUP_STORE_CONNECTION_H_

#include <memory>
#include <pqxx/connection>
#include <pqxx/transaction_base>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "store/connect_options.h"
#include "store/db_connection.h"

namespace sqlgroup::store {

// Connects and applies `options`. UNAVAILABLE names the (masked) target and
// libpq's reason, and says where the connection string came from. An
// UNAVAILABLE that waiting does not cure (a wrong password, a role or
// database that does not exist, pg_hba refusing) is marked: see
// RefusedForGood.
absl::StatusOr<std::unique_ptr<pqxx::connection>> Connect(
    const std::string& dsn, const ConnectOptions& options);

// True for a connection opened for a pooler in transaction mode, or found
// to go through a pooler (ConnectOptions::detect_pooler).
bool TransactionPooled(pqxx::connection& conn);

// The connection a DbConnection holds (store/db_connection.h), for the
// store/ functions it is handed to.
pqxx::connection& PqxxOf(DbConnection& db);

// On a connection through a pooler in transaction mode, sets its limits
// (ConnectOptions, as last followed) for the rest of `tx`, and lists the
// statements its server connection has prepared (store/statements.h): one
// round trip. Call it first in every transaction on such a connection.
// Does nothing on any other connection, whose limits are the session's.
void LocalLimits(pqxx::transaction_base& tx);

// The server-side limits (statement, lock and idle-in-transaction
// timeouts) and commit mode in effect on one open connection. They derive from
// a group's TTL, which can be altered while the connection lives: Follow sets
// new ones on the same connection, and only when they differ.
class ConnectionTimeouts {
 public:
  // Those `options` gave a connection when Connect opened it.
  explicit ConnectionTimeouts(const ConnectOptions& options = {});

  // Sets `options`' limits and commit mode on `conn`, outside any
  // transaction, unless they are those in effect. True when it set them.
  absl::StatusOr<bool> Follow(pqxx::connection& conn,
                              const ConnectOptions& options);

 private:
  absl::Duration statement_, lock_, idle_in_transaction_;
  bool asynchronous_commit_;
};

// Blocks until a notification arrives on `conn` (and dispatches it to its
// receivers), `wake_fd` (or `other_fd`, if >= 0) becomes readable, or
// `timeout` passes, whichever comes first. No timer wake-ups in between: an
// idle member's control thread sleeps here. UNAVAILABLE when the connection
// broke.
absl::Status AwaitNotifications(pqxx::connection& conn, int wake_fd,
                                absl::Duration timeout, int other_fd = -1);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_CONNECTION_H_
