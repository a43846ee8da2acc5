#include "sqlgroup/producer.h"

#include <optional>
#include <pqxx/pqxx>

#include "migrations.h"
#include "status_macros.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/item_store.h"
#include "store/member_store.h"
#include "store/migrator.h"

namespace sqlgroup {

struct Producer::Impl {
  ProducerOptions options;
  std::unique_ptr<pqxx::connection> conn;
};

Producer::Producer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Producer::~Producer() = default;

absl::StatusOr<std::unique_ptr<Producer>> Producer::Create(
    ProducerOptions options) {
  auto impl = std::make_unique<Impl>();
  store::ConnectOptions connect;
  connect.connect_timeout = options.connect_timeout;
  connect.application_name = "sqlgroup-producer";
  ASSIGN_OR_RETURN(impl->conn, store::Connect(options.dsn, connect));
  RETURN_IF_ERROR(
      store::CheckSchemaVersion(*impl->conn, internal::LatestKnownVersion()));
  RETURN_IF_ERROR(store::ReadGroup(*impl->conn, options.group).status());
  impl->options = std::move(options);
  return std::unique_ptr<Producer>(new Producer(std::move(impl)));
}

absl::StatusOr<std::vector<std::string>> Producer::Enqueue(
    const std::vector<NewItem>& items) {
  if (!impl_->conn) {
    store::ConnectOptions connect;
    connect.connect_timeout = impl_->options.connect_timeout;
    connect.application_name = "sqlgroup-producer";
    ASSIGN_OR_RETURN(impl_->conn, store::Connect(impl_->options.dsn, connect));
  }
  std::vector<std::string> ids;
  absl::Status inner;
  // An id that is taken already (two producers gave an item of one key the
  // same microsecond and the same 12 bits of noise) rolls the call back;
  // fresh noise makes another try succeed.
  for (int attempt = 1; attempt <= 3; ++attempt) {
    inner = absl::OkStatus();
    absl::Status s = store::Guard("enqueue", [&] {
      pqxx::work tx(*impl_->conn);
      auto r = EnqueueIn(tx, impl_->options.group, items, impl_->options.notify,
                         impl_->options.max_payload_bytes);
      if (!r.ok()) {
        inner = r.status();
        return;  // rolls back
      }
      tx.commit();
      ids = std::move(*r);
    });
    if (absl::IsUnavailable(s) || absl::IsUnknown(s)) impl_->conn.reset();
    RETURN_IF_ERROR(s);
    if (!absl::IsAlreadyExists(inner)) break;
  }
  RETURN_IF_ERROR(inner);
  return ids;
}

absl::StatusOr<std::vector<std::string>> Producer::EnqueueIn(
    pqxx::work& tx, const std::string& group, const std::vector<NewItem>& items,
    bool notify, size_t max_payload_bytes) {
  // The part count places the ids (item_ids.h).
  std::optional<int> parts;
  RETURN_IF_ERROR(store::Guard("read the group's part count", [&] {
    const pqxx::result r = tx.exec_params(
        "SELECT parts FROM sqlgroup.groups WHERE name = $1", group);
    if (!r.empty()) parts = r[0][0].as<int>();
  }));
  if (!parts) {
    return absl::NotFoundError(absl::StrCat("consumer group '", group,
                                            "' does not exist; nothing was "
                                            "enqueued"));
  }
  return store::InsertItems(tx, group, *parts, items, notify,
                            max_payload_bytes);
}

}  // namespace sqlgroup
