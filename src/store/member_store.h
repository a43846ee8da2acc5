// The statements a member's control thread runs: sessions (register,
// heartbeat, reap, leave) and part ownership (read, take, drop). Each
// conditional write is one statement whose empty result means "no"; the
// database clock alone decides liveness.
#ifndef SQLGROUP_STORE_MEMBER_STORE_H_
#define SQLGROUP_STORE_MEMBER_STORE_H_

#include <cstdint>
#include <optional>
#include <pqxx/connection>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace sqlgroup::store {

struct GroupSettings {
  int parts = 0;
  absl::Duration ttl;
  absl::Duration heartbeat;
};

struct Owner {
  int part = 0;
  std::string session;
  int64_t epoch = 0;
};

// Live sessions (lexical order) and current owners, read in one snapshot.
struct GroupView {
  GroupSettings settings;
  std::vector<std::string> live_sessions;
  // For each live session (same order): how long until it expires unless
  // it heartbeats, by the database clock.
  std::vector<absl::Duration> expires_in;
  // Sessions of the group that expired and wait to be reaped.
  int expired_sessions = 0;
  std::vector<Owner> owners;
};

struct SessionInfo {
  std::string host;
  int pid = 0;
  std::string instance;  // empty: none
};

// NOTIFY payloads on channel "sqlgroup".
std::string MembershipChanged(const std::string& group);  // "rebalance:G"
std::string ItemsArrived(const std::string& group);       // "items:G"
inline constexpr char kChannel[] = "sqlgroup";

// NOT_FOUND when the group does not exist.
absl::StatusOr<GroupSettings> ReadGroup(pqxx::connection& conn,
                                        const std::string& group);

// Every group, by name.
absl::StatusOr<std::vector<std::pair<std::string, GroupSettings>>> ListGroups(
    pqxx::connection& conn);

// NOT_FOUND for `group`, saying how to create one.
absl::Status GroupNotFound(const std::string& group);

// Inserts a session (database clock) and announces it. NOT_FOUND when the
// group does not exist.
absl::StatusOr<std::string> RegisterSession(pqxx::connection& conn,
                                            const std::string& group,
                                            const SessionInfo& info,
                                            bool notify);

// Refreshes the heartbeat unless the session has expired or is gone; then
// nullopt: the session is lost for good. Returns the group's current
// settings so ALTERs reach running members.
absl::StatusOr<std::optional<GroupSettings>> Heartbeat(
    pqxx::connection& conn, const std::string& session);

// Deletes the group's expired sessions (their parts and claims go with
// them) one statement each, stopping once `deadline` has passed, and
// returns their ids.
absl::StatusOr<std::vector<std::string>> ReapExpired(
    pqxx::connection& conn, const std::string& group, bool notify,
    absl::Time deadline = absl::InfiniteFuture());

absl::StatusOr<GroupView> ReadGroupView(pqxx::connection& conn,
                                        const std::string& group);

// Takes those of `parts` that are free, only while `session` is alive; never
// overwrites another owner. Returns the parts taken with their new epochs.
absl::StatusOr<std::vector<Owner>> TakeParts(pqxx::connection& conn,
                                             const std::string& group,
                                             const std::string& session,
                                             const std::vector<int>& parts,
                                             bool notify);

// Releases those of `parts` that `session` owns (their claims are nulled
// by the foreign key) and returns them.
absl::StatusOr<std::vector<int>> DropParts(pqxx::connection& conn,
                                           const std::string& group,
                                           const std::string& session,
                                           const std::vector<int>& parts,
                                           bool notify);

// Deletes the session: a graceful leave, its parts free at once.
absl::Status LeaveSession(pqxx::connection& conn, const std::string& group,
                          const std::string& session, bool notify);

// Deletes up to `limit` entries of the group's ownership log released more
// than `retention` ago, oldest first, and returns how many.
absl::StatusOr<int64_t> PruneOwnershipLog(pqxx::connection& conn,
                                          const std::string& group,
                                          absl::Duration retention, int limit);

// A PostgreSQL array literal of numbers: "{1,2,3}".
template <typename Number>
std::string SqlArray(const std::vector<Number>& values) {
  return absl::StrCat("{", absl::StrJoin(values, ","), "}");
}

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_MEMBER_STORE_H_
