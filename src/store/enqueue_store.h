// Enqueueing, as the Producer runs it: a batch in a transaction of its own
// on the producer's connection, or in the caller's transaction (the
// transactional outbox, Producer::EnqueueIn, which is why this header
// names pqxx::work); and forgetting a batch's idempotency key.
#ifndef SQLGROUP_STORE_ENQUEUE_STORE_H_
#define SQLGROUP_STORE_ENQUEUE_STORE_H_

#include <pqxx/transaction>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sqlgroup/producer.h"
#include "store/db_connection.h"

namespace sqlgroup::store {

// Enqueues `items` into `group` in `tx` (store::InsertItems, with the
// group's part count placing their ids) and returns their ids; visible
// when `tx` commits. NOT_FOUND when the group does not exist (nothing
// enqueued); INVALID_ARGUMENT for an oversized payload; with
// options.idempotency_key, an earlier enqueue's ids when that key was
// used before. A database error leaves `tx` to be rolled back.
absl::StatusOr<std::vector<std::string>> EnqueueIn(
    pqxx::work& tx, const std::string& group, const std::vector<NewItem>& items,
    const EnqueueOptions& options);

// EnqueueIn in a transaction of its own on `db`, committed when it
// succeeds and rolled back otherwise. Errors as EnqueueIn's, and
// UNAVAILABLE (the connection broke: nothing committed) or UNKNOWN (lost
// during COMMIT: the batch may have committed).
absl::StatusOr<std::vector<std::string>> EnqueueBatch(
    DbConnection& db, const std::string& group,
    const std::vector<NewItem>& items, const EnqueueOptions& options);

// Deletes the record of the enqueue with idempotency `key` in `group`
// (sqlgroup.forget_enqueue_key): nobody will retry it.
absl::Status ForgetEnqueueKey(DbConnection& db, const std::string& group,
                              const std::string& key);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_ENQUEUE_STORE_H_
