// Topics (schema 20) on a facade's connection: create, delete, list,
// describe, and a group's subscription. The rules (names, a group reads
// one topic, a topic in use is kept) live in sql/020_topics.sql's
// functions, whose sentences come back as the status's message. Names no
// pqxx.
#ifndef SQLGROUP_STORE_TOPIC_STORE_H_
#define SQLGROUP_STORE_TOPIC_STORE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sqlgroup/admin.h"
#include "store/db_connection.h"

namespace sqlgroup::store {

// OK when the schema has topics (20 or newer), else FAILED_PRECONDITION
// saying to migrate.
absl::Status CheckTopicsStored(DbConnection& db);

// ALREADY_EXISTS when the name is taken, INVALID_ARGUMENT when it is not a
// name.
absl::Status CreateTopic(DbConnection& db, const std::string& name);

// NOT_FOUND when there is no such topic; FAILED_PRECONDITION naming the
// groups that read it.
absl::Status DeleteTopic(DbConnection& db, const std::string& name);

// Every topic by name, or the one named (NOT_FOUND if missing), each with
// the groups that read it; with `count_waiting`, each group's waiting
// items and the oldest one's age.
absl::StatusOr<std::vector<TopicInfo>> ListTopics(
    DbConnection& db, const std::optional<std::string>& name,
    bool count_waiting);

// Subscribes `group` to `topic`, or ends its subscription (nullopt), and
// says whether anything changed. Waits for the topic's publishes in
// flight.
absl::StatusOr<bool> SetGroupTopic(DbConnection& db, const std::string& group,
                                   const std::optional<std::string>& topic);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_TOPIC_STORE_H_
