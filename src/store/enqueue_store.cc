#include "store/enqueue_store.h"

#include <optional>
#include <pqxx/pqxx>
#include <utility>

#include "absl/strings/str_cat.h"
#include "enqueue_fingerprint.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/item_store.h"

namespace sqlgroup::store {
namespace {

// $1 group. Its part count, which places the ids (item_ids.h), and the
// schema's version (what the idempotency key's claim can check); no row:
// no such group.
constexpr char kReadPartCount[] =
    "SELECT parts, (SELECT max(version) FROM sqlgroup.schema_migrations) "
    "FROM sqlgroup.groups WHERE name = $1";

// The first schema that records an idempotency key's fingerprint.
constexpr int kFingerprintsFrom = 16;

// $1 group, $2 idempotency key.
constexpr char kForgetEnqueueKey[] =
    "SELECT sqlgroup.forget_enqueue_key($1, $2)";

}  // namespace

absl::StatusOr<std::vector<std::string>> EnqueueIn(
    pqxx::work& tx, const std::string& group, const std::vector<NewItem>& items,
    const EnqueueOptions& options) {
  std::optional<int> parts;
  int schema = 0;
  absl::Status s = Guard("read the group's part count", [&] {
    const pqxx::result r = tx.exec_params(kReadPartCount, group);
    if (!r.empty()) {
      parts = r[0][0].as<int>();
      schema = r[0][1].as<int>(0);
    }
  });
  if (!s.ok()) return s;
  if (!parts) {
    return absl::NotFoundError(absl::StrCat("consumer group '", group,
                                            "' does not exist; nothing was "
                                            "enqueued"));
  }
  EnqueueKey key{options.idempotency_key, options.forget_key};
  if (!key.key.empty() && schema >= kFingerprintsFrom) {
    key.fingerprint = EnqueueFingerprint(items);
  }
  return InsertItems(tx, group, *parts, items, options.notify,
                     options.max_payload_bytes,
                     options.idempotency_key.empty() ? nullptr : &key);
}

absl::StatusOr<std::vector<std::string>> EnqueueBatch(
    DbConnection& db, const std::string& group,
    const std::vector<NewItem>& items, const EnqueueOptions& options) {
  absl::StatusOr<std::vector<std::string>> ids;
  absl::Status s = Guard("enqueue", [&] {
    pqxx::work tx(PqxxOf(db));
    LocalLimits(tx);
    ids = EnqueueIn(tx, group, items, options);
    if (ids.ok()) tx.commit();  // else rolls back
  });
  if (!s.ok()) return s;
  return ids;
}

absl::Status ForgetEnqueueKey(DbConnection& db, const std::string& group,
                              const std::string& key) {
  return Guard("forget the last batch's key", [&] {
    pqxx::work tx(PqxxOf(db));
    LocalLimits(tx);
    tx.exec_params(kForgetEnqueueKey, group, key);
    tx.commit();
  });
}

}  // namespace sqlgroup::store
