// What one member reads of its whole group now and then, beside its parts'
// lag: the dead letters and the pauses (for the metrics), and the removal
// of dead letters that outlived the group's retention.
#ifndef SQLGROUP_STORE_GROUP_FACTS_H_
#define SQLGROUP_STORE_GROUP_FACTS_H_

#include <cstdint>
#include <pqxx/connection>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sqlgroup::store {

struct GroupFacts {
  int64_t dead_items = 0;
  // Since the oldest dead letter died, by the database clock; 0 if none.
  absl::Duration oldest_dead;
  bool paused = false;      // the whole group
  int64_t paused_keys = 0;  // keys paused one by one
  std::string topic;        // the topic the group reads; "" for none
  // Items published to `topic` so far; -1 unknown (no topic, or a role
  // granted before schema 20 that may not read it).
  int64_t topic_published = -1;
};

// The group's facts on a database at schema `schema` (no pauses before
// 17, no topics before 20). One snapshot; at most 5 s
// (statement_timeout).
absl::StatusOr<GroupFacts> ReadGroupFacts(pqxx::connection& conn,
                                          const std::string& group, int schema);

// Removes up to `max_rows` of the group's dead letters that died longer
// ago than its dead_retention (sqlgroup.dead_expire, schema 18), and says
// how many; 0 without a retention. -1 when the role may not call the
// function (a role granted by hand without it), which is no error.
absl::StatusOr<int64_t> ExpireDeadItems(pqxx::connection& conn,
                                        const std::string& group, int max_rows);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_GROUP_FACTS_H_
