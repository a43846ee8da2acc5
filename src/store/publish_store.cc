#include "store/publish_store.h"

#include <map>
#include <pqxx/pqxx>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/interval.h"

namespace sqlgroup::store {
namespace {

// $1 topic, $2 idempotency key.
constexpr char kForgetPublishKey[] =
    "SELECT sqlgroup.forget_publish_key($1, $2)";

// The sentences of sqlgroup.publish_many, with the codes their SQLSTATEs
// stand for; other errors as Guard maps them.
absl::Status PublishError(const pqxx::sql_error& e) {
  static const auto* const kOurs = new std::map<std::string, absl::StatusCode>{
      {"42704", absl::StatusCode::kNotFound},
      {"55000", absl::StatusCode::kFailedPrecondition},
      {"22023", absl::StatusCode::kInvalidArgument},
      {"22004", absl::StatusCode::kInvalidArgument},
      {"42501", absl::StatusCode::kPermissionDenied}};
  if (auto it = kOurs->find(SqlStateOf(e)); it != kOurs->end()) {
    return absl::Status(it->second, PrimaryMessage(e));
  }
  return StatusFromCurrentException("publish");
}

// The call of sqlgroup.publish_items for `items`, each with its delay;
// `key`: the idempotency key, or empty.
std::string PublishSql(pqxx::work& tx, const std::string& topic,
                       const std::vector<NewItem>& items,
                       const std::string& key) {
  std::vector<std::string> keys, payloads, delays;
  for (const NewItem& item : items) {
    keys.push_back(item.key ? tx.quote(*item.key) : "NULL");
    payloads.push_back(absl::StrCat(tx.quote_raw(item.payload), "::bytea"));
    delays.push_back(tx.quote(ToInterval(item.delay)));
  }
  return absl::StrCat("SELECT id::text FROM sqlgroup.publish_items(",
                      tx.quote(topic), ", ARRAY[", absl::StrJoin(keys, ","),
                      "]::text[], ARRAY[", absl::StrJoin(payloads, ","),
                      "]::bytea[], ARRAY[", absl::StrJoin(delays, ","),
                      "]::interval[], ", key.empty() ? "NULL" : tx.quote(key),
                      ") AS id");
}

}  // namespace

absl::StatusOr<std::vector<std::string>> PublishIn(
    pqxx::work& tx, const std::string& topic, const std::vector<NewItem>& items,
    const EnqueueOptions& options) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].payload.size() > options.max_payload_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "item ", i, " has a payload of ", items[i].payload.size(),
          " bytes, more than the limit of ", options.max_payload_bytes,
          " (ProducerOptions::max_payload_bytes); nothing was published"));
    }
  }
  std::vector<std::string> ids;
  try {
    if (!options.forget_key.empty()) {
      tx.exec_params(kForgetPublishKey, topic, options.forget_key);
    }
    if (items.empty()) return ids;
    for (const pqxx::row& row :
         tx.exec(PublishSql(tx, topic, items, options.idempotency_key))) {
      ids.push_back(row[0].as<std::string>());
    }
  } catch (const pqxx::sql_error& e) {
    return PublishError(e);
  } catch (...) {
    return StatusFromCurrentException("publish");
  }
  return ids;
}

absl::StatusOr<std::vector<std::string>> PublishBatch(
    DbConnection& db, const std::string& topic,
    const std::vector<NewItem>& items, const EnqueueOptions& options) {
  absl::StatusOr<std::vector<std::string>> ids;
  absl::Status s = Guard("publish", [&] {
    pqxx::work tx(PqxxOf(db));
    LocalLimits(tx);
    ids = PublishIn(tx, topic, items, options);
    if (ids.ok()) tx.commit();  // else rolls back
  });
  if (!s.ok()) return s;
  return ids;
}

absl::Status ForgetPublishKey(DbConnection& db, const std::string& topic,
                              const std::string& key) {
  return Guard("forget the last batch's key", [&] {
    pqxx::work tx(PqxxOf(db));
    LocalLimits(tx);
    tx.exec_params(kForgetPublishKey, topic, key);
    tx.commit();
  });
}

}  // namespace sqlgroup::store
