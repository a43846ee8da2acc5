// Publishing to a topic (schema 20), as the Producer runs it: a batch in a
// transaction of its own on the producer's connection, or in the caller's
// transaction. Through sqlgroup.publish_many, which writes each item into
// every group that reads the topic (sql/020_topics.sql).
#ifndef SQLGROUP_STORE_PUBLISH_STORE_H_
#define SQLGROUP_STORE_PUBLISH_STORE_H_

#include <pqxx/transaction>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sqlgroup/producer.h"
#include "store/db_connection.h"

namespace sqlgroup::store {

// Publishes `items` to `topic` in `tx` and returns their ids (the same in
// every group); visible when `tx` commits. NOT_FOUND (no such topic),
// FAILED_PRECONDITION (no group reads it), INVALID_ARGUMENT (an oversized
// payload), PERMISSION_DENIED; nothing is published then. With
// options.idempotency_key, a publish the topic has seen with that key
// returns its ids and adds nothing. options.notify is not used: a publish
// always wakes the groups' members.
absl::StatusOr<std::vector<std::string>> PublishIn(
    pqxx::work& tx, const std::string& topic, const std::vector<NewItem>& items,
    const EnqueueOptions& options);

// PublishIn in a transaction of its own on `db`, committed when it
// succeeds. Errors as PublishIn's, and UNAVAILABLE (the connection broke:
// nothing committed) or UNKNOWN (lost during COMMIT: it may have).
absl::StatusOr<std::vector<std::string>> PublishBatch(
    DbConnection& db, const std::string& topic,
    const std::vector<NewItem>& items, const EnqueueOptions& options);

// Deletes the record of the publish with idempotency `key` to `topic`
// (sqlgroup.forget_publish_key): nobody will retry it.
absl::Status ForgetPublishKey(DbConnection& db, const std::string& topic,
                              const std::string& key);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_PUBLISH_STORE_H_
