#include "store/topic_store.h"

#include <map>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "schema_skew.h"
#include "status_macros.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/interval.h"
#include "store/schema_store.h"

namespace sqlgroup::store {
namespace {

// $1 name, or NULL for all. Topics by name: name, created_at and
// created_by.
constexpr char kTopics[] =
    "SELECT t.name, (extract(epoch from t.created_at) * 1000000)::bigint, "
    "t.created_by FROM sqlgroup.topics t "
    "WHERE $1::text IS NULL OR t.name = $1 ORDER BY t.name";

// $1 name, or NULL for all. The subscribed groups: topic, group and when
// it subscribed (microseconds since the epoch).
constexpr char kSubscribers[] =
    "SELECT g.topic, g.name, "
    "(extract(epoch from g.subscribed_at) * 1000000)::bigint "
    "FROM sqlgroup.groups g WHERE g.topic IS NOT NULL "
    "AND ($1::text IS NULL OR g.topic = $1) ORDER BY g.topic, g.name";

// Whether the role may read a topic's count: asked apart, since PostgreSQL
// checks EXECUTE on every function a statement names.
constexpr char kMayCount[] =
    "SELECT has_function_privilege('sqlgroup.topic_published(text)', "
    "'EXECUTE')";

// $1 topic.
constexpr char kPublished[] = "SELECT sqlgroup.topic_published($1)";

// $1 group. Its waiting items, and the oldest one's age in microseconds
// (0 when none wait).
const std::string& WaitingSql() {
  static const std::string* const kSql = new std::string(
      absl::StrCat("SELECT count(*), coalesce(",
                   MicrosOf("clock_timestamp() - min(i.enqueued_at)"),
                   ", 0) FROM sqlgroup.items i WHERE i.group_name = $1"));
  return *kSql;
}

// How long a change of topics or subscriptions waits for the topic's
// publishes in flight: new publishes queue behind it meanwhile, so a
// publishing transaction left open must not stall the topic for long.
constexpr char kLockTimeout[] = "SET LOCAL lock_timeout = '5s'";

// Runs `f` in a transaction on `db`, its lock waits bounded by
// kLockTimeout. An error our topic functions raise comes back as their
// sentence alone, with the code its SQLSTATE stands for; any other as
// Guard maps it, `what` saying what was being done.
template <typename T, typename F>
absl::StatusOr<T> Change(DbConnection& db, std::string_view what, F&& f) {
  static const auto* const kOurs = new std::map<std::string, absl::StatusCode>{
      {"42704", absl::StatusCode::kNotFound},
      {"42710", absl::StatusCode::kAlreadyExists},
      {"42602", absl::StatusCode::kInvalidArgument},
      {"2BP01", absl::StatusCode::kFailedPrecondition},
      {"55006", absl::StatusCode::kFailedPrecondition}};
  try {
    pqxx::work tx(PqxxOf(db));
    tx.exec(kLockTimeout);
    T out = f(tx);
    tx.commit();
    return out;
  } catch (const pqxx::sql_error& e) {
    if (auto it = kOurs->find(SqlStateOf(e)); it != kOurs->end()) {
      return absl::Status(it->second, PrimaryMessage(e));
    }
    if (SqlStateOf(e) == "55P03") {
      return absl::AbortedError(absl::StrCat(
          "cannot ", std::string(what),
          ": waited 5 s for the topic's publishes in flight (a transaction "
          "that published and has not ended) or for the group's row; "
          "nothing was changed; run it again once they end"));
    }
    return StatusFromCurrentException(what);
  } catch (...) {
    return StatusFromCurrentException(what);
  }
}

}  // namespace

absl::Status CheckTopicsStored(DbConnection& db) {
  ASSIGN_OR_RETURN(const internal::SchemaState schema, CheckSchema(db));
  if (schema.version >= internal::kTopicsFrom) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("topics need schema ", internal::kTopicsFrom,
                   " and the database has schema ", schema.version,
                   "; run `sqlgroup migrate` first (nothing was changed)"));
}

absl::Status CreateTopic(DbConnection& db, const std::string& name) {
  return Change<bool>(db, "create the topic",
                      [&](pqxx::work& tx) {
                        tx.exec_params("SELECT sqlgroup.topic_create($1)",
                                       name);
                        return true;
                      })
      .status();
}

absl::Status DeleteTopic(DbConnection& db, const std::string& name) {
  return Change<bool>(db, "delete the topic",
                      [&](pqxx::work& tx) {
                        tx.exec_params("SELECT sqlgroup.topic_delete($1)",
                                       name);
                        return true;
                      })
      .status();
}

absl::StatusOr<std::vector<TopicInfo>> ListTopics(
    DbConnection& db, const std::optional<std::string>& name,
    bool count_waiting) {
  std::vector<TopicInfo> topics;
  RETURN_IF_ERROR(Guard("list topics", [&] {
    // One snapshot: a group is listed under the topic it read then.
    pqxx::work tx(PqxxOf(db));
    tx.exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY");
    std::map<std::string, size_t> index;
    for (const pqxx::row& row : tx.exec_params(kTopics, name)) {
      TopicInfo t;
      t.name = row[0].as<std::string>();
      t.created_at = absl::FromUnixMicros(row[1].as<int64_t>());
      t.created_by = row[2].as<std::string>();
      index[t.name] = topics.size();
      topics.push_back(std::move(t));
    }
    for (const pqxx::row& row : tx.exec_params(kSubscribers, name)) {
      auto it = index.find(row[0].as<std::string>());
      if (it == index.end()) continue;  // created since: not listed
      TopicSubscriber s;
      s.group = row[1].as<std::string>();
      s.subscribed_at = absl::FromUnixMicros(row[2].as<int64_t>());
      if (count_waiting) {
        const pqxx::row w = tx.exec_params1(WaitingSql(), s.group);
        s.waiting = w[0].as<int64_t>();
        s.oldest_age = absl::Microseconds(w[1].as<int64_t>());
      }
      topics[it->second].groups.push_back(std::move(s));
    }
    if (count_waiting && !topics.empty() && tx.exec1(kMayCount)[0].as<bool>()) {
      for (TopicInfo& t : topics) {
        t.published =
            tx.exec_params1(kPublished, t.name)[0].as<int64_t>(int64_t{-1});
      }
    }
    tx.commit();
  }));
  if (name && topics.empty()) {
    return absl::NotFoundError(
        absl::StrCat("topic ", *name,
                     " does not exist; `sqlgroup topic list` shows the "
                     "topics"));
  }
  return topics;
}

absl::StatusOr<bool> SetGroupTopic(DbConnection& db, const std::string& group,
                                   const std::optional<std::string>& topic) {
  return Change<bool>(db, "change the group's topic", [&](pqxx::work& tx) {
    return tx.exec_params1("SELECT sqlgroup.subscribe($1, $2)", group, topic)[0]
        .as<bool>();
  });
}

}  // namespace sqlgroup::store
