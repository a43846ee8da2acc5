#include "store/member_store.h"

#include <algorithm>
#include <map>
#include <pqxx/pqxx>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/interval.h"
#include "store/statements.h"

namespace sqlgroup::store {
namespace {

// A session is alive while heartbeated_at > clock_timestamp() - its
// group's TTL, or, a static member that stopped, until its away_until
// (schema 8). The same predicate guards heartbeats, takes and acks. The
// coalesce matters: away_until is NULL for every other session, and
// NOT (false OR NULL) is NULL, which would never reap it.
constexpr char kAlive[] =
    "(s.heartbeated_at > clock_timestamp() - g.session_ttl "
    "OR coalesce(s.away_until, '-infinity') > clock_timestamp())";

// The group's settings as kSettingsColumns columns, read by SettingsFrom.
constexpr int kSettingsColumns = 5;
const std::string& SettingsColumns() {
  static const std::string* const kColumns = new std::string(absl::StrCat(
      "g.parts, ", MicrosOf("g.session_ttl"), ", ",
      MicrosOf("g.heartbeat_interval"), ", g.ordering = 'key', g.assignor"));
  return *kColumns;
}

GroupSettings SettingsFrom(const pqxx::row& row, int first) {
  GroupSettings s;
  s.parts = row[first].as<int>();
  s.ttl = absl::Microseconds(row[first + 1].as<int64_t>());
  s.heartbeat = absl::Microseconds(row[first + 2].as<int64_t>());
  s.key_order = row[first + 3].as<bool>();
  s.assignor = row[first + 4].as<std::string>();
  return s;
}

constexpr char kHeartbeat[] = "sqlgroup_heartbeat";
constexpr char kWatchedHeartbeat[] = "sqlgroup_watched_heartbeat";
constexpr char kGroupView[] = "sqlgroup_group_view";

// The live members' fingerprint (Beat::membership, GroupView::membership)
// from their count and newest creation time: the one expression both
// statements must agree on.
std::string Fingerprint(const std::string& count,
                        const std::string& newest_created) {
  return absl::StrCat(count, "::text || '/' || coalesce(",
                      MicrosOf(newest_created), "::text, '-')");
}

// The heartbeat: one statement, autocommitted and prepared, since every
// member sends it every interval. One row by primary key and the group's
// settings, so its cost does not grow with the members.
// `ids`: which sessions (a condition on s.id); `returning`: what it returns
// of s and g.
std::string HeartbeatUpdate(const std::string& ids,
                            const std::string& returning) {
  return absl::StrCat(
      "UPDATE sqlgroup.sessions s SET heartbeated_at = clock_timestamp() "
      "FROM sqlgroup.groups g WHERE s.id ",
      ids, " AND g.name = s.group_name AND ", kAlive, " RETURNING ", returning);
}
std::string HeartbeatSql() {
  return HeartbeatUpdate("= $1::uuid", SettingsColumns());
}

// The watched heartbeat of the sessions of $1 (any groups; one member's,
// or all of a process's sharing a heartbeat): one UPDATE by primary key, and
// per group one read of its session rows for when the next other session
// expires and a fingerprint of the live ones, so an idle member needs no
// other query to reap on time and to notice a change nobody announced.
// O(members) per group and statement, so a member alone sends it only when
// its reap timer fires (or a TTL after the last), not every interval.
// Others' expiry counts only the sessions this statement did not refresh
// (those it did expire a TTL from now), and those it refreshed count as
// live whatever the snapshot (taken before it) says.
std::string WatchedHeartbeatSql() {
  return absl::StrCat(
      "WITH beat AS (",
      HeartbeatUpdate(
          "= ANY($1::uuid[])",
          absl::StrCat("s.id, s.group_name, g.session_ttl, g.parts, ",
                       MicrosOf("g.session_ttl"), " AS ttl_us, ",
                       MicrosOf("g.heartbeat_interval"),
                       " AS heartbeat_us, g.ordering = 'key' AS key_order, "
                       "g.assignor")),
      "), fresh AS (SELECT array_agg(id) AS ids FROM beat), "
      // Per group, not per session: 50 sessions of one group read its rows
      // once (a read per session cost 16x as much).
      "seen AS (SELECT bg.group_name, o.* "
      "  FROM (SELECT DISTINCT group_name, session_ttl FROM beat) bg, fresh, "
      "  LATERAL (SELECT "
      // An away static member expires at its away_until: as if it had
      // heartbeated a TTL before.
      "    min(greatest(x.heartbeated_at, x.away_until - bg.session_ttl)) "
      "      FILTER (WHERE x.id <> ALL(fresh.ids)) AS oldest, "
      "    count(*) FILTER (WHERE x.id = ANY(fresh.ids) OR x.heartbeated_at > "
      "      clock_timestamp() - bg.session_ttl "
      "      OR coalesce(x.away_until, '-infinity') > clock_timestamp()) AS "
      "live, "
      "    max(x.created_at) FILTER (WHERE x.id = ANY(fresh.ids) OR "
      "      x.heartbeated_at > clock_timestamp() - bg.session_ttl "
      "      OR coalesce(x.away_until, '-infinity') > clock_timestamp()) AS "
      "newest "
      "    FROM sqlgroup.sessions x WHERE x.group_name = bg.group_name) o) "
      "SELECT beat.id::text, beat.parts, beat.ttl_us, beat.heartbeat_us, "
      "beat.key_order, beat.assignor, ",
      MicrosOf("seen.oldest + beat.session_ttl - clock_timestamp()"), ", ",
      Fingerprint("seen.live", "seen.newest"),
      " FROM beat JOIN seen ON seen.group_name = beat.group_name");
}

// The membership read: one statement, so one snapshot and one round trip
// (every member reads it on every change of membership): the live sessions
// in lexical order, how many expired ones wait to be reaped, the reader's
// own parts with their epochs and the parts others own.
std::string GroupViewSql() {
  return absl::StrCat(
      "SELECT ", SettingsColumns(),
      ", (SELECT string_agg(s.id::text || CASE WHEN s.static_timeout "
      "  IS NOT NULL THEN '/' || s.instance ELSE '' END, ',' ORDER BY s.id) "
      "  FROM sqlgroup.sessions s WHERE s.group_name = g.name AND ",
      kAlive,
      "), (SELECT count(*) FROM sqlgroup.sessions s "
      "  WHERE s.group_name = g.name AND NOT (",
      kAlive,
      ")), (SELECT string_agg(p.part::text || '/' || p.epoch::text, ',') "
      "  FROM sqlgroup.session_parts p "
      "  WHERE p.group_name = g.name AND p.parts_of = g.parts "
      "  AND p.session_id = $2::uuid), "
      "(SELECT string_agg(o.session_id::text || '=' || o.parts, ';') FROM ("
      "  SELECT p.session_id, string_agg(p.part::text, ',') AS parts "
      "  FROM sqlgroup.session_parts p WHERE p.group_name = g.name "
      "  AND p.parts_of = g.parts "
      "  AND p.session_id <> $2::uuid GROUP BY p.session_id) o), "
      "(SELECT ",
      Fingerprint("count(*)", "max(s.created_at)"),
      " FROM sqlgroup.sessions s WHERE s.group_name = g.name AND ", kAlive,
      "), (SELECT string_agg(s.instance || '=' || ",
      MicrosOf("s.away_until - 'epoch'::timestamptz"),
      ", ',') FROM sqlgroup.sessions s WHERE s.group_name = g.name "
      "  AND s.away_until > clock_timestamp()) "
      "FROM sqlgroup.groups g WHERE g.name = $1");
}

// SQL true when part `a` of `a_parts` and part `b` of `b_parts` share a
// key: sqlgroup::RangesOverlap (keyspace.h), in SQL.
std::string RangesOverlapSql(const std::string& a, const std::string& a_parts,
                             const std::string& b, const std::string& b_parts) {
  return absl::StrCat("(", a, " * ", b_parts, " < (", b, " + 1) * ", a_parts,
                      " AND ", b, " * ", a_parts, " < (", a, " + 1) * ",
                      b_parts, ")");
}

// Stamps the end of every open take of `session` in the ownership log. Run
// after the statement that removed the session (and, by cascade, its parts)
// in the same transaction, so the stamp is later than the removal itself.
void ReleaseSessionHistory(pqxx::work& tx, const std::string& session,
                           const char* released_by) {
  tx.exec_params(
      "UPDATE sqlgroup.ownership_log SET released_at = clock_timestamp(), "
      "released_by = $2 WHERE session_id = $1::uuid AND released_at IS NULL",
      session, released_by);
}

}  // namespace

void Notify(pqxx::work& tx, const std::string& payload) {
  tx.exec_params("SELECT pg_notify($1, $2)", kChannel, payload);
}

void PrepareMemberStatements(pqxx::connection& conn) {
  Prepare(conn, kHeartbeat, HeartbeatSql());
  Prepare(conn, kWatchedHeartbeat, WatchedHeartbeatSql());
  Prepare(conn, kGroupView, GroupViewSql());
}

absl::Status GroupNotFound(const std::string& group) {
  return absl::NotFoundError(
      absl::StrCat("consumer group '", group,
                   "' does not exist; create it with `sqlgroup group create ",
                   group, " --parts P` (see `sqlgroup group list`)"));
}

absl::StatusOr<std::vector<std::pair<std::string, GroupSettings>>> ListGroups(
    pqxx::connection& conn) {
  using Groups = std::vector<std::pair<std::string, GroupSettings>>;
  return GuardOr<Groups>("list groups", [&] {
    pqxx::nontransaction tx(conn);
    Groups groups;
    for (const pqxx::row& row :
         tx.exec(absl::StrCat("SELECT g.name, ", SettingsColumns(),
                              " FROM sqlgroup.groups g ORDER BY g.name"))) {
      groups.emplace_back(row[0].as<std::string>(), SettingsFrom(row, 1));
    }
    return groups;
  });
}

absl::StatusOr<GroupSettings> ReadGroup(pqxx::connection& conn,
                                        const std::string& group) {
  std::optional<GroupSettings> found;
  absl::Status s = Guard("read group", [&] {
    pqxx::nontransaction tx(conn);
    const pqxx::result r = tx.exec_params(
        absl::StrCat("SELECT ", SettingsColumns(),
                     " FROM sqlgroup.groups g WHERE g.name = $1"),
        group);
    if (!r.empty()) found = SettingsFrom(r[0], 0);
  });
  if (!s.ok()) return s;
  if (!found) return GroupNotFound(group);
  return *found;
}

absl::StatusOr<Registered> RegisterSession(pqxx::connection& conn,
                                           const std::string& group,
                                           const SessionInfo& info,
                                           bool notify) {
  std::string id;
  bool replaced = false;
  const bool is_static =
      !info.instance.empty() && info.static_timeout > absl::ZeroDuration();
  absl::Status s = Guard("register session", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    if (is_static) {
      // The place of the instance: whoever held it, running, away or
      // expired, is replaced (and fenced: its session is gone).
      const pqxx::result old = tx.exec_params(
          "DELETE FROM sqlgroup.sessions WHERE group_name = $1 "
          "AND instance = $2 AND static_timeout IS NOT NULL "
          "RETURNING id::text, away_until IS NOT NULL",
          group, info.instance);
      for (const pqxx::row& row : old) {
        // Away: it stopped gracefully, and its takes ended clean. Else the
        // process died and restarted (or still runs): as a reap.
        ReleaseSessionHistory(tx, row[0].as<std::string>(),
                              row[1].as<bool>() ? "returned" : "replaced");
      }
      replaced = !old.empty();
    }
    const pqxx::result r = tx.exec_params(
        "INSERT INTO sqlgroup.sessions (group_name, host, pid, instance, "
        "static_timeout) "
        "SELECT name, $2, $3, nullif($4, ''), $5::interval "
        "FROM sqlgroup.groups WHERE name = $1 RETURNING id::text",
        group, info.host, info.pid, info.instance,
        is_static ? std::optional<std::string>(ToInterval(info.static_timeout))
                  : std::nullopt);
    if (r.empty()) return;
    id = r[0][0].as<std::string>();
    if (notify) Notify(tx, MembershipChanged(group));
    tx.commit();
  });
  if (!s.ok()) return s;
  if (id.empty()) return GroupNotFound(group);
  return Registered{id, replaced};
}

absl::StatusOr<std::optional<Beat>> Heartbeat(pqxx::connection& conn,
                                              const std::string& session,
                                              bool watch) {
  if (watch) {
    auto beats = HeartbeatMany(conn, {session});
    if (!beats.ok()) return beats.status();
    auto it = beats->find(session);
    if (it == beats->end()) return std::optional<Beat>();
    return std::optional<Beat>(it->second);
  }
  return GuardOr<std::optional<Beat>>("heartbeat", [&] {
    pqxx::nontransaction tx(conn);
    const pqxx::result r = ExecPrepared(tx, kHeartbeat, session);
    std::optional<Beat> out;
    if (!r.empty()) out.emplace().settings = SettingsFrom(r[0], 0);
    return out;
  });
}

absl::StatusOr<std::map<std::string, Beat>> HeartbeatMany(
    pqxx::connection& conn, const std::vector<std::string>& sessions) {
  using Beats = std::map<std::string, Beat>;
  return GuardOr<Beats>("heartbeat", [&] {
    pqxx::nontransaction tx(conn);
    Beats beats;
    for (const pqxx::row& row :
         ExecPrepared(tx, kWatchedHeartbeat, SqlArray(sessions))) {
      Beat& beat = beats[row[0].as<std::string>()];
      beat.settings = SettingsFrom(row, 1);
      constexpr int kAfter = 1 + kSettingsColumns;
      if (!row[kAfter].is_null()) {
        beat.next_expiry = absl::Microseconds(row[kAfter].as<int64_t>());
      }
      beat.membership = row[kAfter + 1].as<std::string>();
    }
    return beats;
  });
}

absl::StatusOr<std::vector<std::string>> ReapExpired(pqxx::connection& conn,
                                                     const std::string& group,
                                                     bool notify,
                                                     absl::Time deadline) {
  std::vector<std::string> expired;
  absl::Status s = Guard("find expired sessions", [&] {
    pqxx::nontransaction tx(conn);
    for (const pqxx::row& row : tx.exec_params(
             "SELECT s.id::text FROM sqlgroup.sessions s "
             "JOIN sqlgroup.groups g ON g.name = s.group_name "
             "WHERE s.group_name = $1 "
             "AND s.heartbeated_at <= clock_timestamp() - g.session_ttl",
             group)) {
      expired.push_back(row[0].as<std::string>());
    }
  });
  if (!s.ok()) return s;
  // One statement per session: a zombie whose open ack transaction still
  // holds one of its takes delays (lock_timeout) only its own reaping.
  std::vector<std::string> reaped;
  absl::Status first_error;
  for (const std::string& id : expired) {
    if (absl::Now() > deadline) break;  // the rest wait for the next round
    s = Guard("reap expired session", [&] {
      pqxx::work tx(conn);
      LocalLimits(tx);
      const pqxx::result r = tx.exec_params(
          "DELETE FROM sqlgroup.sessions s USING sqlgroup.groups g "
          "WHERE s.id = $1::uuid AND g.name = s.group_name "
          "AND s.heartbeated_at <= clock_timestamp() - g.session_ttl "
          "RETURNING s.away_until IS NOT NULL",
          id);
      const bool gone = !r.empty();
      // A static member that stepped away (drained) and did not come back
      // in time ended its takes clean; any other expired session died.
      if (gone)
        ReleaseSessionHistory(tx, id, r[0][0].as<bool>() ? "away" : "reap");
      if (gone && notify) Notify(tx, MembershipChanged(group));
      tx.commit();
      if (gone) reaped.push_back(id);
    });
    if (!s.ok()) {
      if (absl::IsUnavailable(s)) return s;
      if (first_error.ok()) first_error = s;
    }
  }
  if (reaped.empty() && !first_error.ok()) return first_error;
  return reaped;
}

absl::StatusOr<GroupView> ReadGroupView(pqxx::connection& conn,
                                        const std::string& group,
                                        const std::string& session) {
  std::optional<GroupView> view;
  absl::Status s = Guard("read group members", [&] {
    pqxx::nontransaction tx(conn);
    const pqxx::result r = ExecPrepared(tx, kGroupView, group, session);
    if (r.empty()) return;
    const pqxx::row& row = r[0];
    view.emplace();
    view->settings = SettingsFrom(row, 0);
    constexpr int kAfter = kSettingsColumns;
    if (!row[kAfter].is_null()) {
      for (absl::string_view live :
           absl::StrSplit(row[kAfter].as<std::string>(), ',')) {
        const std::pair<std::string, std::string> f =
            absl::StrSplit(live, absl::MaxSplits('/', 1));
        view->live_sessions.push_back(f.first);
        if (!f.second.empty()) view->static_instances[f.first] = f.second;
      }
    }
    view->expired_sessions = row[kAfter + 1].as<int>();
    if (!row[kAfter + 2].is_null()) {
      for (absl::string_view entry :
           absl::StrSplit(row[kAfter + 2].as<std::string>(), ',')) {
        const std::pair<std::string, std::string> f =
            absl::StrSplit(entry, '/');
        view->ownership.mine[std::stoi(f.first)] = std::stoll(f.second);
      }
    }
    view->membership = row[kAfter + 4].as<std::string>();
    if (!row[kAfter + 5].is_null()) {
      for (absl::string_view away :
           absl::StrSplit(row[kAfter + 5].as<std::string>(), ',')) {
        const std::pair<std::string, std::string> f =
            absl::StrSplit(away, absl::MaxSplits('=', 1));
        view->away_until[f.first] = absl::FromUnixMicros(std::stoll(f.second));
      }
    }
    if (!row[kAfter + 3].is_null()) {
      for (absl::string_view owner :
           absl::StrSplit(row[kAfter + 3].as<std::string>(), ';')) {
        const std::pair<std::string, std::string> f =
            absl::StrSplit(owner, '=');
        for (absl::string_view part : absl::StrSplit(f.second, ',')) {
          const int p = std::stoi(std::string(part));
          view->ownership.others.push_back(p);
          view->ownership.owner_of[p] = f.first;
        }
      }
    }
  });
  if (!s.ok()) return s;
  if (!view) return GroupNotFound(group);
  return *view;
}

absl::StatusOr<std::vector<Owner>> TakeParts(pqxx::connection& conn,
                                             const std::string& group,
                                             const std::string& session,
                                             const std::vector<int>& parts,
                                             int parts_of) {
  return GuardOr<std::vector<Owner>>("take parts", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    std::vector<Owner> taken;
    std::vector<int> taken_parts;
    std::vector<int64_t> taken_epochs;
    for (const pqxx::row& row : tx.exec_params(
             absl::StrCat(
                 "INSERT INTO sqlgroup.session_parts "
                 "  (group_name, part, session_id, parts_of) "
                 "SELECT $1, p, $2::uuid, $4 FROM unnest($3::int[]) AS p "
                 "WHERE EXISTS (SELECT 1 FROM sqlgroup.sessions s "
                 "  JOIN sqlgroup.groups g ON g.name = s.group_name "
                 "  WHERE s.id = $2::uuid AND g.parts = $4 AND ",
                 kAlive,
                 ") AND NOT EXISTS (SELECT 1 FROM sqlgroup.session_parts o "
                 "  WHERE o.group_name = $1 AND o.parts_of <> $4 AND ",
                 RangesOverlapSql("o.part", "o.parts_of", "p", "$4"),
                 ") ON CONFLICT (group_name, parts_of, part) DO NOTHING "
                 "RETURNING part, epoch"),
             group, session, SqlArray(parts), parts_of)) {
      taken.push_back({row[0].as<int>(), session, row[1].as<int64_t>()});
      taken_parts.push_back(taken.back().part);
      taken_epochs.push_back(taken.back().epoch);
    }
    if (!taken.empty()) {
      // A separate statement: its clock_timestamp() is read after the
      // insert above has waited out any release of these parts.
      tx.exec_params(
          "INSERT INTO sqlgroup.ownership_log "
          "  (group_name, part, epoch, session_id, parts_of) "
          "SELECT $1, t.part, t.epoch, $2::uuid, $5 "
          "FROM unnest($3::int[], $4::bigint[]) AS t(part, epoch)",
          group, session, SqlArray(taken_parts), SqlArray(taken_epochs),
          parts_of);
      // The previous take of each part under this part count: did it end
      // with its owner dead? (PK order: the newest epoch before ours.)
      std::map<int, Owner*> by_part;
      for (Owner& o : taken) by_part[o.part] = &o;
      for (const pqxx::row& row : tx.exec_params(
               absl::StrCat(
                   "SELECT t.part, ", MicrosOf("l.released_at"),
                   " FROM unnest($2::int[], $3::bigint[]) AS t(part, epoch) "
                   "CROSS JOIN LATERAL (SELECT released_at, released_by "
                   "  FROM sqlgroup.ownership_log l WHERE l.group_name = $1 "
                   "  AND l.part = t.part AND l.epoch < t.epoch AND "
                   "  l.parts_of = $4 ORDER BY l.epoch DESC LIMIT 1) l "
                   "WHERE l.released_by IN ('reap', 'replaced')"),
               group, SqlArray(taken_parts), SqlArray(taken_epochs),
               parts_of)) {
        by_part.at(row[0].as<int>())->predecessor_died_at =
            absl::FromUnixMicros(row[1].as<int64_t>());
      }
    }
    tx.commit();
    return taken;
  });
}

absl::StatusOr<std::vector<int>> DropParts(
    pqxx::connection& conn, const std::string& group,
    const std::string& session, const std::vector<int>& parts, int parts_of,
    bool notify, const std::vector<std::string>& wake) {
  return GuardOr<std::vector<int>>("drop parts", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    std::vector<int> dropped;
    std::vector<int64_t> epochs;
    for (const pqxx::row& row : tx.exec_params(
             "DELETE FROM sqlgroup.session_parts WHERE group_name = $1 "
             "AND session_id = $2::uuid AND part = ANY($3::int[]) "
             "AND parts_of = $4 RETURNING part, epoch",
             group, session, SqlArray(parts), parts_of)) {
      dropped.push_back(row[0].as<int>());
      epochs.push_back(row[1].as<int64_t>());
    }
    if (!dropped.empty()) {
      tx.exec_params(
          "UPDATE sqlgroup.ownership_log SET released_at = clock_timestamp(), "
          "released_by = 'drop' WHERE session_id = $1::uuid "
          "AND released_at IS NULL AND epoch = ANY($2::bigint[])",
          session, SqlArray(epochs));
    }
    if (!dropped.empty() && notify && !wake.empty()) {
      tx.exec_params(absl::StrCat("SELECT pg_notify('", SessionChannel(""),
                                  "' || w, $2) FROM unnest($1::uuid[]) AS w"),
                     SqlArray(wake), kPartsFreed);
    }
    tx.commit();
    return dropped;
  });
}

absl::StatusOr<std::optional<std::string>> StaticHolder(
    pqxx::connection& conn, const std::string& group,
    const std::string& instance) {
  return GuardOr<std::optional<std::string>>(
      "read the instance's session", [&] {
        pqxx::nontransaction tx(conn);
        const pqxx::result r = tx.exec_params(
            absl::StrCat("SELECT s.host || ' pid ' || s.pid "
                         "FROM sqlgroup.sessions s JOIN sqlgroup.groups g "
                         "ON g.name = s.group_name WHERE s.group_name = $1 "
                         "AND s.instance = $2 AND s.static_timeout IS NOT NULL "
                         "AND ",
                         kAlive),
            group, instance);
        if (r.empty()) return std::optional<std::string>();
        return std::optional<std::string>(r[0][0].as<std::string>());
      });
}

absl::Status StepAway(pqxx::connection& conn, const std::string& group,
                      const std::string& session, bool notify) {
  return Guard("step away", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    tx.exec("SET LOCAL synchronous_commit = on");
    const bool away =
        !tx.exec_params(
               "UPDATE sqlgroup.sessions SET away_until = clock_timestamp() + "
               "static_timeout WHERE id = $1::uuid "
               "AND static_timeout IS NOT NULL RETURNING id",
               session)
             .empty();
    if (away && notify) Notify(tx, MembershipChanged(group));
    tx.commit();
  });
}

absl::Status LeaveInstance(pqxx::connection& conn, const std::string& group,
                           const std::string& instance, bool notify) {
  bool found = false;
  absl::Status s = Guard("leave group", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    const pqxx::result r = tx.exec_params(
        "DELETE FROM sqlgroup.sessions WHERE group_name = $1 "
        "AND instance = $2 AND static_timeout IS NOT NULL RETURNING id::text",
        group, instance);
    for (const pqxx::row& row : r) {
      ReleaseSessionHistory(tx, row[0].as<std::string>(), "leave");
    }
    found = !r.empty();
    if (found && notify) Notify(tx, MembershipChanged(group));
    tx.commit();
  });
  if (!s.ok()) return s;
  if (!found) {
    return absl::NotFoundError(absl::StrCat(
        "group ", group, " has no static member with instance '", instance,
        "' (static members are started with --instance and "
        "--static_timeout; `sqlgroup group describe ",
        group, "` lists the members)"));
  }
  return absl::OkStatus();
}

absl::Status ReportConnections(pqxx::connection& conn,
                               const std::string& session, int connections,
                               int budget) {
  return Guard("report connections", [&] {
    pqxx::nontransaction tx(conn);
    tx.exec_params(
        "UPDATE sqlgroup.sessions SET connections = $2, connection_budget = "
        "$3 WHERE id = $1::uuid",
        session, connections, budget);
  });
}

absl::Status MarkRevoking(pqxx::connection& conn, const std::string& group,
                          const std::string& session,
                          const std::vector<int>& parts, int parts_of,
                          bool revoking) {
  return Guard("mark parts as being handed over", [&] {
    pqxx::nontransaction tx(conn);
    // $1 group, $2 session, $3 parts (int[]), $4 their part count, $5
    // whether they are being handed over. Rows already so are not written.
    tx.exec_params(
        "UPDATE sqlgroup.session_parts SET revoking_since = CASE WHEN $5 "
        "THEN clock_timestamp() END WHERE group_name = $1 AND session_id = "
        "$2::uuid AND part = ANY($3::int[]) AND parts_of = $4 AND "
        "(revoking_since IS NULL) = $5",
        group, session, SqlArray(parts), parts_of, revoking);
  });
}

absl::Status ReportCircuit(pqxx::connection& conn, const std::string& session,
                           bool open, const std::string& error) {
  return Guard("record the circuit breaker's state", [&] {
    pqxx::nontransaction tx(conn);
    // $1 session, $2 open, $3 the last error (one line, bounded).
    tx.exec_params(
        "UPDATE sqlgroup.sessions SET circuit_open_since = CASE WHEN $2 THEN "
        "clock_timestamp() END, circuit_error = CASE WHEN $2 THEN "
        "left($3, 500) END WHERE id = $1::uuid",
        session, open, absl::StrReplaceAll(error, {{"\n", " "}}));
  });
}

absl::Status LeaveSession(pqxx::connection& conn, const std::string& group,
                          const std::string& session, bool notify) {
  return Guard("leave group", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    // Durable even on a control connection with asynchronous commit: a
    // leave lost in a crash would leave its parts idle for a TTL.
    tx.exec("SET LOCAL synchronous_commit = on");
    tx.exec_params("DELETE FROM sqlgroup.sessions WHERE id = $1::uuid",
                   session);
    ReleaseSessionHistory(tx, session, "leave");
    if (notify) Notify(tx, MembershipChanged(group));
    tx.commit();
  });
}

absl::StatusOr<int64_t> PruneOwnershipLog(pqxx::connection& conn,
                                          const std::string& group,
                                          absl::Duration retention, int limit) {
  return GuardOr<int64_t>("prune ownership log", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    const int64_t n =
        tx.exec_params(
              "DELETE FROM sqlgroup.ownership_log WHERE group_name = $1 "
              "AND (part, epoch) IN (SELECT part, epoch "
              "  FROM sqlgroup.ownership_log WHERE group_name = $1 "
              "  AND released_at < clock_timestamp() - $2::interval "
              "  ORDER BY released_at LIMIT $3)",
              group, ToInterval(retention), limit)
            .affected_rows();
    tx.commit();
    return n;
  });
}

}  // namespace sqlgroup::store
