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

namespace sqlgroup::store {

struct GroupSettings {
  int parts = 0;
  absl::Duration ttl;
  absl::Duration heartbeat;
  // groups.ordering = 'key': a key's items are handed out one at a time,
  // in enqueue order (keyed_claims.cc); 'none': the sweep in key order.
  bool key_order = true;
  // groups.assignor: the name of the group's assignor (AssignorNamed).
  std::string assignor = "lexical";
};

struct Owner {
  int part = 0;
  std::string session;
  int64_t epoch = 0;
  // From TakeParts: when the part's previous owner died (its session was
  // reaped, or a live static session replaced by a new process under its
  // name), database clock; unset after a clean handover. Items it may
  // have been running then come back without an outcome.
  std::optional<absl::Time> predecessor_died_at;
};

// Who owns what, as one member needs to know it: its own parts with their
// epochs, and which parts other sessions own and whose they are (read per
// session, not per part: 4,096 session ids per read were most of the
// read's cost).
struct Ownership {
  std::map<int, int64_t> mine;
  std::vector<int> others;
  std::map<int, std::string> owner_of;  // the parts in `others`
};

// Live sessions (lexical order) and current ownership, read in one snapshot.
struct GroupView {
  GroupSettings settings;
  std::vector<std::string> live_sessions;
  // The instance name of each live static member's session (schema 8).
  std::map<std::string, std::string> static_instances;
  // Static members that stopped and keep their place: instance -> when
  // their parts move (database clock).
  std::map<std::string, absl::Time> away_until;
  // Sessions of the group that expired and wait to be reaped.
  int expired_sessions = 0;
  // The live sessions' count and newest creation time (see Beat).
  std::string membership;
  Ownership ownership;  // as seen by the session that read it
};

// What a heartbeat that got through reports about the group, from the same
// statement: what a member needs to stay idle without reading the view.
struct Beat {
  GroupSettings settings;  // current, so ALTERs reach running members
  // The rest only from a watched heartbeat (left at these defaults by any
  // other).
  // Until the earliest other session expires unless it heartbeats
  // (negative: one already has), by the database clock; infinite when the
  // member is alone.
  absl::Duration next_expiry = absl::InfiniteDuration();
  // The live sessions' count and newest creation time, this one included,
  // as in GroupView::membership: a change nobody announced (a member that
  // does not NOTIFY) shows here at the next watched heartbeat. Every join is
  // newer than every live session, and a leave alone lowers the count.
  std::string membership;
};

struct SessionInfo {
  std::string host;
  int pid = 0;
  std::string instance;  // empty: none
  // > 0 (with an instance): a static member (schema 8), which replaces the
  // session of its instance when it registers and, when it stops, stays
  // away for this long with its parts instead of leaving.
  absl::Duration static_timeout = absl::ZeroDuration();
};

// NOTIFY payloads on channel "sqlgroup", which every member hears.
std::string MembershipChanged(const std::string& group);  // "rebalance:G"
std::string ItemsArrived(const std::string& group);       // "items:G"
// Items that fall due `delay` after the commit: "items:G@<microseconds>"
// ('@' is never part of a group name).
std::string ItemsDueIn(const std::string& group, absl::Duration delay);
// The delay of an ItemsDueIn payload of `group`; nullopt for anything else.
std::optional<absl::Duration> ParseItemsDueIn(const std::string& group,
                                              const std::string& payload);
// Items due now whose ids begin with the given 16-bit prefixes (the first
// four hex digits of the UUID): "items:G#0a1b,ff00" ('#' is never part of
// a group name). Members wake only the parts that hold those keys, instead
// of probing every idle part. sqlgroup.announce_items (schema 12), which
// both kinds of producer call, names at most kMaxAnnouncedPrefixes and
// sends at most kMaxTargetedAnnouncements of these per transaction, then
// the plain ItemsArrived (which PostgreSQL folds into one).
// ItemsArrived when `ids` have more than kMaxAnnouncedPrefixes prefixes.
std::string ItemsArrivedIn(const std::string& group,
                           const std::vector<std::string>& ids);
// The key ranges an ItemsArrivedIn payload of `group` names; nullopt for
// anything else (a malformed list included).
std::optional<std::vector<KeyRange>> ParseItemsArrivedIn(
    const std::string& group, const std::string& payload);
inline constexpr size_t kMaxAnnouncedPrefixes = 16;
inline constexpr int kMaxTargetedAnnouncements = 8;
inline constexpr char kChannel[] = "sqlgroup";
// One session's own channel, "sqlgroup:<id>": a part it waits for was
// freed. Addressed, so a drop wakes the member that takes the part instead
// of every member of the group.
std::string SessionChannel(const std::string& session);
inline constexpr char kPartsFreed[] = "freed";

// Sends `payload` on kChannel when `tx` commits.
void Notify(pqxx::work& tx, const std::string& payload);

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

struct Registered {
  std::string session;
  // A static member took the place of an earlier session of its instance.
  bool replaced = false;
};

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

// Deletes the static session of `instance`, running or away, and announces
// it: its parts move at once (scale-down). NOT_FOUND when there is none.
absl::Status LeaveInstance(pqxx::connection& conn, const std::string& group,
                           const std::string& instance, bool notify);

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

// Deletes the session: a graceful leave, its parts free at once.
absl::Status LeaveSession(pqxx::connection& conn, const std::string& group,
                          const std::string& session, bool notify);

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
