// One open database connection, as a facade outside store/ (Admin,
// Producer) holds it: it opens one, hands it to store/ functions and drops
// it, and never reaches inside. Only store/ code names the pqxx connection
// within (PqxxOf, store/connection.h).
//
//   ASSIGN_OR_RETURN(store::DbConnection db,
//                    store::DbConnection::Open(dsn, options));
//   RETURN_IF_ERROR(store::CheckSchema(db, expected_version));
//
// Thread safety: one thread at a time, as the pqxx connection it holds.
#ifndef SQLGROUP_STORE_DB_CONNECTION_H_
#define SQLGROUP_STORE_DB_CONNECTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "store/connect_options.h"

namespace sqlgroup::store {

class DbConnection {
 public:
  // Connects and applies `options` (store::Connect). UNAVAILABLE names the
  // masked target and libpq's reason (see RefusedForGood, ServerBusy).
  static absl::StatusOr<DbConnection> Open(const std::string& dsn,
                                           const ConnectOptions& options);

  DbConnection(DbConnection&& other) noexcept;
  DbConnection& operator=(DbConnection&& other) noexcept;
  ~DbConnection();  // closes the connection
  // A moved-from DbConnection may only be assigned to or destroyed.

  // The pqxx connection; defined, and reached (PqxxOf), in store/ only.
  struct Native;
  Native& native() const { return *native_; }

 private:
  explicit DbConnection(std::unique_ptr<Native> native);
  std::unique_ptr<Native> native_;
};

// True for a connection opened for a pooler in transaction mode, or found
// to go through a pooler (ConnectOptions::detect_pooler).
bool TransactionPooled(DbConnection& db);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_DB_CONNECTION_H_
