// The statements a member's control thread runs: sessions (register,
// heartbeat, reap, leave) and part ownership (read, take, drop). Each
// conditional write is one statement whose empty result means "no"; the
// database clock alone decides liveness.
#ifndef SQLGROUP_STORE_MEMBER_STORE_H_
#define SQLGROUP_STORE_MEMBER_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <pqxx/connection>
#include <pqxx/transaction>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "keyspace.h"
#include "store/model.h"
#include "store/notifications.h"

namespace sqlgroup::store {

// Sends `payload` on kChannel when `tx` commits.
void Notify(pqxx::work& tx, const std::string& payload);

// Stamps the end of every open take of `session` in the ownership log,
// `released_by` saying how (a reap and a fence end it uncleanly: the next
// owner counts an attempt). Run after the statement that removed the
// session (and, by cascade, its parts) in the same transaction, so the
// stamp is later than the removal itself.
void ReleaseSessionHistory(pqxx::work& tx, const std::string& session,
                           const char* released_by);

// Registers the statements a member's control connection runs most often
// (heartbeat, membership read) as prepared statements on `conn`.
void PrepareMemberStatements(pqxx::connection& conn);

// NOT_FOUND when the group does not exist.
absl::StatusOr<GroupSettings> ReadGroup(pqxx::connection& conn,
                                        const std::string& group);

// Every group, by name.
absl::StatusOr<std::vector<std::pair<std::string, GroupSettings>>> ListGroups(
    pqxx::connection& conn);

// NOT_FOUND for `group`, saying how to create one.
absl::Status GroupNotFound(const std::string& group);

// Inserts a session (database clock) and announces it. NOT_FOUND when the
// group does not exist. A static member's first deletes the session its
// instance had, if any (its parts free with it, to be taken back at once).
absl::StatusOr<Registered> RegisterSession(pqxx::connection& conn,
                                           const std::string& group,
                                           const SessionInfo& info,
                                           bool notify);

// The live static session of `instance` in `group`, if any: "host pid" of
// its process, for a message.
absl::StatusOr<std::optional<std::string>> StaticHolder(
    pqxx::connection& conn, const std::string& group,
    const std::string& instance);

// A static member's graceful stop: the session stays, with its parts,
// until its static timeout from now (by the database clock). Announced,
// so the others' metrics show it away.
absl::Status StepAway(pqxx::connection& conn, const std::string& group,
                      const std::string& session, bool notify);

// Deletes the static session of `instance` and announces it: its parts
// move at once (scale-down). With `only_away`, in the same statement, only
// if its process is not running (it went away, or has not heartbeated for
// the group's TTL): FAILED_PRECONDITION naming the running process
// otherwise. NOT_FOUND when there is no such session.
absl::Status LeaveInstance(pqxx::connection& conn, const std::string& group,
                           const std::string& instance, bool notify,
                           bool only_away = false);

// Refreshes the heartbeat unless the session has expired or is gone; then
// nullopt: the session is lost for good. `watch` also reads the others'
// expiry and the membership fingerprint (O(members) rows).
absl::StatusOr<std::optional<Beat>> Heartbeat(pqxx::connection& conn,
                                              const std::string& session,
                                              bool watch);

// Heartbeats `sessions` (of any groups) in one statement, as a watched
// Heartbeat does one (which is this with one session): the members of one
// process sharing a connection. Each next_expiry counts only the sessions
// this statement did not refresh. Sessions that expired or are gone have no
// entry.
absl::StatusOr<std::map<std::string, Beat>> HeartbeatMany(
    pqxx::connection& conn, const std::vector<std::string>& sessions);

// Deletes the group's expired sessions (their parts go with them, and
// with the parts every claim under them) one statement each, stopping once
// `deadline` has passed, and returns their ids.
absl::StatusOr<std::vector<std::string>> ReapExpired(
    pqxx::connection& conn, const std::string& group, bool notify,
    absl::Time deadline = absl::InfiniteFuture());

// NOT_FOUND when the group does not exist.
absl::StatusOr<GroupView> ReadGroupView(pqxx::connection& conn,
                                        const std::string& group,
                                        const std::string& session);

// Takes those of `parts` (numbered under `parts_of`, the part count the
// member runs under) that are free, only while `session` is alive and the
// group's part count is still `parts_of`, and only those whose range no
// take of another part count overlaps (schema 9: the old layout still
// draining after a change); never overwrites another owner. Returns the
// parts taken with their new epochs, and for each whose previous take
// ended uncleanly, when (Owner::predecessor_died_at). Announces nothing: a
// take frees nothing anyone waits for.
absl::StatusOr<std::vector<Owner>> TakeParts(pqxx::connection& conn,
                                             const std::string& group,
                                             const std::string& session,
                                             const std::vector<int>& parts,
                                             int parts_of);

// Releases those of `parts` (numbered under `parts_of`) that `session`
// owns (every claim under them goes with the take: acks fenced on it
// delete nothing from then on) and returns them. With `notify`, wakes the
// sessions in `wake` (those that should take the parts) on their own
// channels.
absl::StatusOr<std::vector<int>> DropParts(
    pqxx::connection& conn, const std::string& group,
    const std::string& session, const std::vector<int>& parts, int parts_of,
    bool notify, const std::vector<std::string>& wake);

// Marks `parts` (numbered under `parts_of`) of `session` as being handed
// over since now (database clock), or, `revoking` false, as no longer
// (the target came back to it), for describe (schema 13). A part marked
// already keeps its time.
absl::Status MarkRevoking(pqxx::connection& conn, const std::string& group,
                          const std::string& session,
                          const std::vector<int>& parts, int parts_of,
                          bool revoking);

// Records for describe that the session's circuit breaker opened (since
// now, database clock, with the handler's last `error`) or, `open` false,
// closed again (schema 13).
absl::Status ReportCircuit(pqxx::connection& conn, const std::string& session,
                           bool open, const std::string& error);

// Records the connections the session's member holds now and its
// process's budget (schema 11), for describe.
absl::Status ReportConnections(pqxx::connection& conn,
                               const std::string& session, int connections,
                               int budget);

// Deletes the session: a graceful leave, its parts free at once. `secret`:
// the session's (SessionInfo::secret), which a role scoped to groups needs
// to end a live session; empty for a session registered without one.
absl::Status LeaveSession(pqxx::connection& conn, const std::string& group,
                          const std::string& session, bool notify,
                          const std::string& secret);

// Deletes up to `limit` entries of the group's ownership log released more
// than `retention` ago, oldest first, and returns how many.
absl::StatusOr<int64_t> PruneOwnershipLog(pqxx::connection& conn,
                                          const std::string& group,
                                          absl::Duration retention, int limit);

// A PostgreSQL array literal of values that need no quoting (numbers,
// UUIDs): "{1,2,3}".
template <typename Value>
std::string SqlArray(const std::vector<Value>& values) {
  return absl::StrCat("{", absl::StrJoin(values, ","), "}");
}

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_MEMBER_STORE_H_
