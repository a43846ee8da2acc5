#include "store/db_connection.h"

#include <pqxx/connection>
#include <utility>

#include "store/connection.h"

namespace sqlgroup::store {

struct DbConnection::Native {
  std::unique_ptr<pqxx::connection> conn;
};

absl::StatusOr<DbConnection> DbConnection::Open(const std::string& dsn,
                                                const ConnectOptions& options) {
  absl::StatusOr<std::unique_ptr<pqxx::connection>> conn =
      Connect(dsn, options);
  if (!conn.ok()) return conn.status();
  return DbConnection(
      std::make_unique<Native>(Native{.conn = std::move(*conn)}));
}

DbConnection::DbConnection(std::unique_ptr<Native> native)
    : native_(std::move(native)) {}
DbConnection::DbConnection(DbConnection&& other) noexcept = default;
DbConnection& DbConnection::operator=(DbConnection&& other) noexcept = default;
DbConnection::~DbConnection() = default;

pqxx::connection& PqxxOf(DbConnection& db) { return *db.native().conn; }

}  // namespace sqlgroup::store
