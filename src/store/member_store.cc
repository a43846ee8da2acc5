#include "store/member_store.h"

#include <algorithm>
#include <map>
#include <optional>
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
#include "sqlgroup/version.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/interval.h"
#include "store/session_sql.h"
#include "store/statements.h"
#include "url_secrets.h"

namespace sqlgroup::store {
namespace {

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

}  // namespace

void ReleaseSessionHistory(pqxx::work& tx, const std::string& session,
                           const char* released_by) {
  tx.exec_params(
      "UPDATE sqlgroup.ownership_log SET released_at = clock_timestamp(), "
      "released_by = $2 WHERE session_id = $1::uuid AND released_at IS NULL",
      session, released_by);
}

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
    // Schema 14's trigger refuses a member that knows too old a schema
    // (SQLSTATE 3F000: FAILED_PRECONDITION, the member stops).
    const std::optional<std::string> static_timeout =
        is_static ? std::optional<std::string>(ToInterval(info.static_timeout))
                  : std::nullopt;
    const pqxx::result r =
        !info.secret.empty()
            ? tx.exec_params(
                  "INSERT INTO sqlgroup.sessions (group_name, host, pid, "
                  "instance, static_timeout, member_version, member_schema, "
                  "secret_hash) "
                  "SELECT name, $2, $3, nullif($4, ''), $5::interval, $6, $7, "
                  "sha256(convert_to($8, 'UTF8')) "
                  "FROM sqlgroup.groups WHERE name = $1 RETURNING id::text",
                  group, info.host, info.pid, info.instance, static_timeout,
                  std::string(kVersion), kSchemaVersion, info.secret)
        : info.record_version
            ? tx.exec_params(
                  "INSERT INTO sqlgroup.sessions (group_name, host, pid, "
                  "instance, static_timeout, member_version, member_schema) "
                  "SELECT name, $2, $3, nullif($4, ''), $5::interval, $6, $7 "
                  "FROM sqlgroup.groups WHERE name = $1 RETURNING id::text",
                  group, info.host, info.pid, info.instance, static_timeout,
                  std::string(kVersion), kSchemaVersion)
            : tx.exec_params(
                  "INSERT INTO sqlgroup.sessions (group_name, host, pid, "
                  "instance, static_timeout) "
                  "SELECT name, $2, $3, nullif($4, ''), $5::interval "
                  "FROM sqlgroup.groups WHERE name = $1 RETURNING id::text",
                  group, info.host, info.pid, info.instance, static_timeout);
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
                           const std::string& instance, bool notify,
                           bool only_away) {
  bool found = false;
  std::optional<std::string> running;
  absl::Status s = Guard("leave group", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    // $3: only a session whose process is not running.
    const pqxx::result r = tx.exec_params(
        "DELETE FROM sqlgroup.sessions s WHERE s.group_name = $1 "
        "AND s.instance = $2 AND s.static_timeout IS NOT NULL AND (NOT $3 "
        "OR s.away_until IS NOT NULL OR s.heartbeated_at <= "
        "clock_timestamp() - (SELECT g.session_ttl FROM sqlgroup.groups g "
        "WHERE g.name = $1)) RETURNING s.id::text",
        group, instance, only_away);
    for (const pqxx::row& row : r) {
      ReleaseSessionHistory(tx, row[0].as<std::string>(), "leave");
    }
    found = !r.empty();
    if (!found && only_away) {
      const pqxx::result live = tx.exec_params(
          "SELECT host, pid, round(extract(epoch FROM clock_timestamp() - "
          "heartbeated_at)::numeric, 1)::text FROM sqlgroup.sessions WHERE "
          "group_name = $1 AND instance = $2 AND static_timeout IS NOT NULL",
          group, instance);
      if (!live.empty()) {
        running = absl::StrCat("pid ", live[0][1].as<std::string>(), " on ",
                               live[0][0].as<std::string>(), " heartbeated ",
                               live[0][2].as<std::string>(), " s ago");
      }
    }
    if (found && notify) Notify(tx, MembershipChanged(group));
    tx.commit();
  });
  if (!s.ok()) return s;
  if (running) {
    return absl::FailedPreconditionError(absl::StrCat(
        "instance '", instance, "' of group ", group, " is running (", *running,
        "): its process would register again at once. Stop that process "
        "first (SIGTERM), then run group leave; or pass --force to end its "
        "session anyway"));
  }
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

absl::Status ReportCircuit(pqxx::connection& conn, const std::string& session,
                           bool open, const std::string& error) {
  return Guard("record the circuit breaker's state", [&] {
    pqxx::nontransaction tx(conn);
    // $1 session, $2 open, $3 the last error (one line, bounded).
    tx.exec_params(
        "UPDATE sqlgroup.sessions SET circuit_open_since = CASE WHEN $2 THEN "
        "clock_timestamp() END, circuit_error = CASE WHEN $2 THEN "
        "left($3, 500) END WHERE id = $1::uuid",
        session, open, absl::StrReplaceAll(MaskUrlsIn(error), {{"\n", " "}}));
  });
}

absl::Status LeaveSession(pqxx::connection& conn, const std::string& group,
                          const std::string& session, bool notify,
                          const std::string& secret) {
  return Guard("leave group", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    // Durable even on a control connection with asynchronous commit: a
    // leave lost in a crash would leave its parts idle for a TTL.
    tx.exec("SET LOCAL synchronous_commit = on");
    if (!secret.empty()) {
      // For this transaction only: the policy of a role scoped to groups
      // lets it end a live session whose secret it knows (schema 19).
      tx.exec_params("SELECT set_config('sqlgroup.session_secret', $1, true)",
                     secret);
    }
    // None deleted: reaped already (its history says so), or hidden from
    // a role no longer granted the group. Either way not a leave.
    if (tx.exec_params("DELETE FROM sqlgroup.sessions WHERE id = $1::uuid",
                       session)
            .affected_rows() == 0) {
      return;
    }
    ReleaseSessionHistory(tx, session, "leave");
    if (notify) Notify(tx, MembershipChanged(group));
    tx.commit();
  });
}

}  // namespace sqlgroup::store
