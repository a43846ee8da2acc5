#include "store/group_store.h"

#include <map>
#include <optional>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "schema_skew.h"
#include "status_macros.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/interval.h"
#include "store/member_store.h"
#include "store/schema_store.h"

namespace sqlgroup::store {
namespace {

// $1 name, $2 parts, $3 session TTL and $4 heartbeat interval (interval
// literals, ToInterval), $5 ordering ('key' or 'none'), $6 assignor. A
// name taken fails on the primary key (23505: ALREADY_EXISTS).
constexpr char kInsertGroup[] =
    "INSERT INTO sqlgroup.groups (name, parts, session_ttl, "
    "heartbeat_interval, ordering, assignor) "
    "VALUES ($1, $2, $3::interval, $4::interval, $5, $6)";

// $1 name, $2 session TTL and $3 heartbeat interval (interval literals).
// No row: no such group.
constexpr char kUpdateTiming[] =
    "UPDATE sqlgroup.groups SET session_ttl = "
    "$2::interval, heartbeat_interval = $3::interval "
    "WHERE name = $1";

// $1 name, $2 the retention (an interval literal; zero: none).
constexpr char kUpdateDeadRetention[] =
    "UPDATE sqlgroup.groups SET dead_retention = "
    "nullif($2::interval, interval '0') WHERE name = $1";

// $1 name, $2 the topic it reads from now on (schema 20).
constexpr char kSubscribe[] = "SELECT sqlgroup.subscribe($1, $2)";

// $1 name, $2 on_dead ('release' or 'hold').
constexpr char kUpdateOnDead[] =
    "UPDATE sqlgroup.groups SET on_dead = $2 WHERE name = $1";

// Each group's dead-letter retention in microseconds (0: none), on_dead
// policy and topic ('': none), read from the row as JSON so that the same
// statement runs on a schema before 18 (20 for the topic), which has no
// such columns. $1: one group's name, or NULL for all.
constexpr char kReadNewerSettings[] =
    "SELECT g.name, coalesce((extract(epoch from "
    "(to_jsonb(g) ->> 'dead_retention')::interval) * 1000000)::bigint, 0), "
    "coalesce(to_jsonb(g) ->> 'on_dead', 'release'), "
    "coalesce(to_jsonb(g) ->> 'topic', '') "
    "FROM sqlgroup.groups g WHERE $1::text IS NULL OR g.name = $1";

// $1 name. The group's live members that know a schema before 18 (or
// record none: a release before 0.15), as "instance (host H pid P),
// sqlgroup V". The members that run now: one of an older release that
// joins later is not refused (the rolling upgrade's order, docs/
// UPGRADING.md, keeps them out).
const std::string& OldMembersSql() {
  static const std::string* const kSql = new std::string(absl::StrCat(
      "SELECT coalesce(s.instance, 'a member') || ' (host ' || "
      "coalesce(s.host, '?') || ' pid ' || coalesce(s.pid::text, '?') || "
      "'), ' || coalesce('sqlgroup ' || s.member_version, "
      "'a release before 0.15') "
      "FROM sqlgroup.sessions s JOIN sqlgroup.groups g ON g.name = "
      "s.group_name WHERE s.group_name = $1 "
      "AND s.heartbeated_at > clock_timestamp() - g.session_ttl "
      "AND coalesce(s.member_schema, 0) < ",
      internal::kDeadRetentionFrom, " ORDER BY 1"));
  return *kSql;
}

// $1 name. Lifts the group's holds (the pauses by "on_dead hold").
constexpr char kLiftHolds[] =
    "DELETE FROM sqlgroup.pauses WHERE group_name = $1 "
    "AND paused_by = 'on_dead hold'";

// A part count change waits this long for the takes and drops in flight.
constexpr char kPartsChangeLockTimeout[] = "SET LOCAL lock_timeout = '10s'";

// Waits for every take and drop in flight and holds new ones until the
// transaction commits: no take of the old count can commit after the
// change (see sql/009). Acks hold their takes FOR KEY SHARE, which this
// does not block.
constexpr char kHoldTakes[] = "LOCK TABLE sqlgroup.session_parts IN SHARE MODE";

// $1 name. The group's part count and the database clock (microseconds
// since the epoch), locking its row; no row: no such group.
constexpr char kLockPartCount[] =
    "SELECT parts, (extract(epoch from clock_timestamp()) * 1000000)"
    "::bigint FROM sqlgroup.groups WHERE name = $1 FOR UPDATE";

// $1 name, $2 its part count. How many parts of another count (an earlier
// change still in progress) are still owned, and that count (0: none).
constexpr char kOldCountOwned[] =
    "SELECT count(*), coalesce(min(parts_of), 0) "
    "FROM sqlgroup.session_parts WHERE group_name = $1 AND parts_of <> $2";

// $1 name, $2 the new part count. Runs only in the transaction that holds
// the group's row and every take (kLockPartCount, kHoldTakes) and found no
// part of another count owned (kOldCountOwned): nothing can change what
// those reads saw before it commits.
constexpr char kSetPartCount[] =
    "UPDATE sqlgroup.groups SET parts = $2, previous_parts = parts, "
    "parts_changed_at = clock_timestamp() WHERE name = $1";

// $1 name, each. Items, dead items and the ownership log have no foreign
// key to the group: deleted first. Sessions and parts go with the group's
// row, whose deletion (one row or none) says whether the group existed.
constexpr char kDeleteItems[] =
    "DELETE FROM sqlgroup.items WHERE group_name = $1";
constexpr char kDeleteDeadItems[] =
    "DELETE FROM sqlgroup.dead_items WHERE group_name = $1";
constexpr char kDeleteOwnershipLog[] =
    "DELETE FROM sqlgroup.ownership_log WHERE group_name = $1";
constexpr char kDeleteGroup[] = "DELETE FROM sqlgroup.groups WHERE name = $1";

// Fills each config's dead_retention, on_dead and topic.
absl::Status ReadNewerSettings(DbConnection& db,
                               std::vector<GroupConfig>& configs,
                               std::optional<std::string> one) {
  std::map<std::string, GroupConfig> newer;  // those fields only
  RETURN_IF_ERROR(Guard("read group settings", [&] {
    pqxx::nontransaction tx(PqxxOf(db));
    for (const pqxx::row& row : tx.exec_params(kReadNewerSettings, one)) {
      GroupConfig& c = newer[row[0].as<std::string>()];
      c.dead_retention = absl::Microseconds(row[1].as<int64_t>());
      c.on_dead =
          row[2].as<std::string>() == "hold" ? OnDead::kHold : OnDead::kRelease;
      c.topic = row[3].as<std::string>();
    }
  }));
  for (GroupConfig& config : configs) {
    auto it = newer.find(config.name);
    if (it == newer.end()) continue;
    config.dead_retention = it->second.dead_retention;
    config.on_dead = it->second.on_dead;
    config.topic = it->second.topic;
  }
  return absl::OkStatus();
}

GroupConfig ConfigOf(const std::string& name, const GroupSettings& settings) {
  GroupConfig config{name, settings.parts, settings.ttl, settings.heartbeat};
  config.ordering = settings.key_order ? Ordering::kKey : Ordering::kNone;
  config.assignor = settings.assignor;
  return config;
}

}  // namespace

absl::Status InsertGroup(DbConnection& db, const GroupConfig& config) {
  absl::Status s = Guard("create group", [&] {
    pqxx::work tx(PqxxOf(db));
    tx.exec_params(kInsertGroup, config.name, config.parts,
                   ToInterval(config.session_ttl),
                   ToInterval(config.heartbeat_interval),
                   OrderingName(config.ordering), config.assignor);
    if (config.dead_retention > absl::ZeroDuration()) {
      tx.exec_params(kUpdateDeadRetention, config.name,
                     ToInterval(config.dead_retention));
    }
    if (config.on_dead != OnDead::kRelease) {
      tx.exec_params(kUpdateOnDead, config.name, OnDeadName(config.on_dead));
    }
    if (!config.topic.empty()) {
      tx.exec_params(kSubscribe, config.name, config.topic);
    }
    tx.commit();
  });
  if (absl::IsAlreadyExists(s)) {
    return absl::AlreadyExistsError(
        absl::StrCat("consumer group '", config.name,
                     "' already exists; `sqlgroup group describe ", config.name,
                     "` shows it"));
  }
  return s;
}

absl::StatusOr<GroupConfig> ReadGroupConfig(DbConnection& db,
                                            const std::string& name) {
  absl::StatusOr<GroupSettings> settings = ReadGroup(PqxxOf(db), name);
  if (!settings.ok()) return settings.status();
  std::vector<GroupConfig> configs = {ConfigOf(name, *settings)};
  RETURN_IF_ERROR(ReadNewerSettings(db, configs, name));
  return configs[0];
}

absl::StatusOr<std::vector<GroupConfig>> ListGroupConfigs(DbConnection& db) {
  auto groups = ListGroups(PqxxOf(db));
  if (!groups.ok()) return groups.status();
  std::vector<GroupConfig> configs;
  for (const auto& [name, settings] : *groups) {
    configs.push_back(ConfigOf(name, settings));
  }
  RETURN_IF_ERROR(ReadNewerSettings(db, configs, std::nullopt));
  return configs;
}

absl::Status UpdateGroupTiming(DbConnection& db, const std::string& name,
                               absl::Duration session_ttl,
                               absl::Duration heartbeat_interval) {
  bool updated = false;
  absl::Status s = Guard("alter group", [&] {
    pqxx::work tx(PqxxOf(db));
    updated = tx.exec_params(kUpdateTiming, name, ToInterval(session_ttl),
                             ToInterval(heartbeat_interval))
                  .affected_rows() == 1;
    tx.commit();
  });
  if (!s.ok()) return s;
  return updated ? absl::OkStatus() : GroupNotFound(name);
}

absl::Status CheckDeadLetterPoliciesStored(DbConnection& db) {
  ASSIGN_OR_RETURN(const int version, SchemaVersion(db));
  if (version >= internal::kDeadRetentionFrom) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "a group's dead-letter settings (--dead_retention, --on_dead) need "
      "schema ",
      internal::kDeadRetentionFrom, " and the database has schema ", version,
      "; run `sqlgroup migrate` first (nothing was changed)"));
}

absl::Status UpdateDeadRetention(DbConnection& db, const std::string& name,
                                 absl::Duration dead_retention) {
  bool updated = false;
  RETURN_IF_ERROR(Guard("alter group", [&] {
    pqxx::work tx(PqxxOf(db));
    updated =
        tx.exec_params(kUpdateDeadRetention, name, ToInterval(dead_retention))
            .affected_rows() == 1;
    tx.commit();
  }));
  return updated ? absl::OkStatus() : GroupNotFound(name);
}

absl::Status UpdateOnDead(DbConnection& db, const std::string& name,
                          OnDead on_dead) {
  bool updated = false;
  std::vector<std::string> old;
  RETURN_IF_ERROR(Guard("alter group", [&] {
    pqxx::work tx(PqxxOf(db));
    updated = tx.exec_params(kUpdateOnDead, name, OnDeadName(on_dead))
                  .affected_rows() == 1;
    if (!updated) return;
    if (on_dead == OnDead::kHold) {
      for (const pqxx::row& row : tx.exec_params(OldMembersSql(), name)) {
        old.push_back(row[0].as<std::string>());
      }
      if (!old.empty()) return;  // rolled back
    } else if (tx.exec_params(kLiftHolds, name).affected_rows() > 0) {
      tx.exec_params("SELECT sqlgroup.announce_items($1, interval '0')", name);
    }
    tx.commit();
  }));
  if (!updated) return GroupNotFound(name);
  if (!old.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group ", name,
        " runs members of a release before 0.18: ", absl::StrJoin(old, "; "),
        ". They would hand out the rest of a batch whose item died; stop or "
        "upgrade them, then set --on_dead hold (nothing was changed)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PartsChange> ChangePartCount(DbConnection& db,
                                            const std::string& name,
                                            int parts) {
  std::optional<PartsChange> change;
  int in_progress_from = 0, still_owned = 0;
  absl::Status s = Guard("change the part count", [&] {
    pqxx::work tx(PqxxOf(db));
    tx.exec(kPartsChangeLockTimeout);
    tx.exec(kHoldTakes);
    const pqxx::result g = tx.exec_params(kLockPartCount, name);
    if (g.empty()) return;
    change.emplace();
    change->from_parts = g[0][0].as<int>();
    change->to_parts = parts;
    change->at = absl::FromUnixMicros(g[0][1].as<int64_t>());
    const pqxx::row old =
        tx.exec_params1(kOldCountOwned, name, change->from_parts);
    still_owned = old[0].as<int>();
    in_progress_from = old[1].as<int>();
    if (still_owned > 0 || parts == change->from_parts) return;
    tx.exec_params(kSetPartCount, name, parts);
    Notify(tx, MembershipChanged(name));
    tx.commit();
  });
  if (!s.ok()) return s;
  if (!change) return GroupNotFound(name);
  if (still_owned > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group ", name, " is still changing its part count from ",
        in_progress_from, " to ", change->from_parts, ": ", still_owned,
        " part(s) of the ", in_progress_from,
        "-part layout are still owned while their members drain them (a dead "
        "member's go when its session expires). Nothing was changed; run "
        "this again once `sqlgroup group describe ",
        name, "` no longer shows the change in progress"));
  }
  return *change;
}

absl::StatusOr<DeletedGroup> DeleteGroup(DbConnection& db,
                                         const std::string& name, bool force) {
  bool found = false;
  std::optional<DeletedGroup> held;  // refused: what it holds
  DeletedGroup deleted;
  absl::Status s = Guard("delete group", [&] {
    pqxx::work tx(PqxxOf(db));
    // Its topic ('' for none; the column is schema 20's).
    const pqxx::result row = tx.exec_params(
        "SELECT coalesce(to_jsonb(g) ->> 'topic', '') FROM sqlgroup.groups g "
        "WHERE g.name = $1 FOR UPDATE",
        name);
    found = !row.empty();
    if (!found) return;
    if (!row[0][0].as<std::string>().empty()) {
      // Unsubscribed first: the topic's publishes in flight finish (at
      // most 5 s), none after adds an item, and the count below sees
      // what they added.
      tx.exec("SET LOCAL lock_timeout = '5s'");
      tx.exec_params(kSubscribe, name, std::optional<std::string>());
    }
    if (!force) {
      const pqxx::row n = tx.exec_params1(
          "SELECT (SELECT count(*) FROM sqlgroup.items WHERE group_name = $1), "
          "(SELECT count(*) FROM sqlgroup.dead_items WHERE group_name = $1)",
          name);
      if (n[0].as<int64_t>() > 0 || n[1].as<int64_t>() > 0) {
        held = DeletedGroup{n[0].as<int64_t>(), n[1].as<int64_t>()};
        return;  // rolled back
      }
    }
    deleted.items = tx.exec_params(kDeleteItems, name).affected_rows();
    deleted.dead_items = tx.exec_params(kDeleteDeadItems, name).affected_rows();
    tx.exec_params(kDeleteOwnershipLog, name);
    tx.exec_params(kDeleteGroup, name);
    tx.commit();
  });
  if (!s.ok()) return s;
  if (!found) return GroupNotFound(name);
  if (held) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group ", name, " holds ", held->items, " waiting item(s) and ",
        held->dead_items,
        " dead letter(s), which would go with it: pass --force "
        "(DeleteGroupOptions::force) to delete them with the group; nothing "
        "was changed"));
  }
  return deleted;
}

absl::Status RemoveStaticMember(DbConnection& db, const std::string& group,
                                const std::string& instance, bool force) {
  // The group exists first: NOT_FOUND from LeaveInstance names the
  // instance.
  absl::Status s = ReadGroup(PqxxOf(db), group).status();
  if (!s.ok()) return s;
  return LeaveInstance(PqxxOf(db), group, instance, /*notify=*/true,
                       /*only_away=*/!force);
}

}  // namespace sqlgroup::store
