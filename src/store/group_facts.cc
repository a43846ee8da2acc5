#include "store/group_facts.h"

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "schema_skew.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/interval.h"

namespace sqlgroup::store {
namespace {

// $1 group. The dead letters' count and the age of the oldest (the
// dead_items_died_at index answers both), then the pauses when
// `pauses`.
std::string FactsSql(bool pauses) {
  return absl::StrCat(
      "SELECT (SELECT count(*) FROM sqlgroup.dead_items "
      "WHERE group_name = $1), coalesce(",
      MicrosOf("clock_timestamp() - (SELECT min(died_at) FROM "
               "sqlgroup.dead_items WHERE group_name = $1)"),
      ", 0)",
      pauses ? ", (SELECT count(*) FROM sqlgroup.pauses WHERE group_name = $1 "
               "AND block = ''), (SELECT count(*) FROM sqlgroup.pauses "
               "WHERE group_name = $1 AND block <> '')"
             : ", 0, 0");
}

// Whether the role may call dead_expire: asked in a statement of its own,
// since PostgreSQL checks EXECUTE on every function a statement names,
// whatever branch runs.
constexpr char kMayExpire[] =
    "SELECT has_function_privilege('sqlgroup.dead_expire(text, integer)', "
    "'EXECUTE')";

// $1 group. Its topic (NULL: none), and whether the role may read the
// count of what was published to it (asked apart, as kMayExpire).
constexpr char kTopic[] =
    "SELECT g.topic, CASE WHEN to_regprocedure("
    "'sqlgroup.topic_published(text)') IS NULL THEN false "
    "ELSE has_function_privilege('sqlgroup.topic_published(text)', "
    "'EXECUTE') END FROM sqlgroup.groups g WHERE g.name = $1";

// $1 topic.
constexpr char kPublished[] = "SELECT sqlgroup.topic_published($1)";

// $1 group, $2 at most this many.
constexpr char kExpire[] = "SELECT sqlgroup.dead_expire($1, $2)";

}  // namespace

absl::StatusOr<GroupFacts> ReadGroupFacts(pqxx::connection& conn,
                                          const std::string& group,
                                          int schema) {
  return GuardOr<GroupFacts>("read the group's dead letters and pauses", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    tx.exec("SET LOCAL statement_timeout = 5000");
    const pqxx::row row =
        tx.exec_params1(FactsSql(schema >= internal::kPausesFrom), group);
    GroupFacts facts;
    facts.dead_items = row[0].as<int64_t>();
    facts.oldest_dead = absl::Microseconds(row[1].as<int64_t>());
    facts.paused = row[2].as<int64_t>() > 0;
    facts.paused_keys = row[3].as<int64_t>();
    if (schema >= internal::kTopicsFrom) {
      const pqxx::result topic = tx.exec_params(kTopic, group);
      if (!topic.empty() && !topic[0][0].is_null()) {
        facts.topic = topic[0][0].as<std::string>();
        if (topic[0][1].as<bool>()) {
          facts.topic_published =
              tx.exec_params1(kPublished, facts.topic)[0].as<int64_t>(
                  int64_t{-1});
        }
      }
    }
    tx.commit();
    return facts;
  });
}

absl::StatusOr<int64_t> ExpireDeadItems(pqxx::connection& conn,
                                        const std::string& group,
                                        int max_rows) {
  return GuardOr<int64_t>("remove dead letters past the retention", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    tx.exec("SET LOCAL statement_timeout = 5000");
    if (!tx.exec1(kMayExpire)[0].as<bool>()) return int64_t{-1};
    const int64_t removed =
        tx.exec_params1(kExpire, group, max_rows)[0].as<int64_t>();
    tx.commit();
    return removed;
  });
}

}  // namespace sqlgroup::store
