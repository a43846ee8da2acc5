// A consumer group's life cycle on a facade's connection: create, read,
// list, alter its timing or its part count, delete, and remove a static
// member for good. Each function is one transaction; a group that does not
// exist is NOT_FOUND (GroupNotFound's message). Names no pqxx.
#ifndef SQLGROUP_STORE_GROUP_STORE_H_
#define SQLGROUP_STORE_GROUP_STORE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sqlgroup/admin.h"
#include "store/db_connection.h"

namespace sqlgroup::store {

// Inserts the group as `config` says (validated by the caller).
// ALREADY_EXISTS when the name is taken, saying how to see that group.
absl::Status InsertGroup(DbConnection& db, const GroupConfig& config);

// The group's stored settings.
absl::StatusOr<GroupConfig> ReadGroupConfig(DbConnection& db,
                                            const std::string& name);

// Every group's settings, by name.
absl::StatusOr<std::vector<GroupConfig>> ListGroupConfigs(DbConnection& db);

// Sets the group's session TTL and heartbeat interval (validated by the
// caller); members pick them up on their next heartbeat.
absl::Status UpdateGroupTiming(DbConnection& db, const std::string& name,
                               absl::Duration session_ttl,
                               absl::Duration heartbeat_interval);

// OK when the schema stores a group's dead-letter policies (retention,
// on_dead: 18 or newer), else FAILED_PRECONDITION saying to migrate.
absl::Status CheckDeadLetterPoliciesStored(DbConnection& db);

// Sets how long the group's dead letters are kept (validated by the
// caller; zero: until requeued or purged).
absl::Status UpdateDeadRetention(DbConnection& db, const std::string& name,
                                 absl::Duration dead_retention);

// Sets the group's on_dead policy (validated by the caller): kHold only
// while no live member of the group knows a schema before 18
// (FAILED_PRECONDITION naming them); kRelease lifts every hold of the
// group and wakes its members.
absl::Status UpdateOnDead(DbConnection& db, const std::string& name,
                          OnDead on_dead);

// Sets the group's part count to `parts` (1..4096, checked by the caller)
// and announces it, unless it already is (then the change returned has
// from == to) or an earlier change is still in progress: then
// FAILED_PRECONDITION saying how many parts of the old count are still
// owned, and nothing changed. Holds every take and drop while it runs
// (waiting at most 10 s for those in flight: ABORTED after).
absl::StatusOr<PartsChange> ChangePartCount(DbConnection& db,
                                            const std::string& name, int parts);

// Deletes the group with its sessions, parts, items, dead items and
// ownership log, and says how many items and dead items went. Without
// `force`, a group that holds any item or dead item is refused
// (FAILED_PRECONDITION saying how many) and nothing changes. The group's
// row is locked first: no producer adds an item between the count and the
// deletion.
absl::StatusOr<DeletedGroup> DeleteGroup(DbConnection& db,
                                         const std::string& name, bool force);

// Deletes the session of the group's static member `instance`, running or
// away, and announces it: its parts move at once. NOT_FOUND names the
// group when it does not exist, else the instance when it has no session.
absl::Status RemoveStaticMember(DbConnection& db, const std::string& group,
                                const std::string& instance, bool force);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_GROUP_STORE_H_
