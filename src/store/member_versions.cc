#include "store/member_versions.h"

#include <algorithm>
#include <map>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "store/errors.h"
#include "store/member_store.h"
#include "store/notifications.h"
#include "store/session_sql.h"

namespace sqlgroup::store {
namespace {

// The last schema before members recorded their versions.
constexpr int kLastUnrecorded = internal::kVersionsRecordedFrom - 1;
// Static members could be away from schema 8.
constexpr int kAwayFrom = 8;

}  // namespace

std::string MemberVersion::Describe() const {
  std::string text = absl::StrCat("group ", group, ": host ",
                                  host.empty() ? "?" : host, " pid ", pid);
  if (!instance.empty()) absl::StrAppend(&text, " (instance ", instance, ")");
  if (version.empty()) {
    absl::StrAppend(
        &text, ", no version recorded: a release before 0.15 (knows schema ",
        knows, " at most)");
  } else {
    absl::StrAppend(&text, ", sqlgroup ", version, " (knows schema ", schema,
                    ")");
  }
  return text;
}

absl::StatusOr<internal::SchemaState> ReadSchemaState(pqxx::connection& conn) {
  return GuardOr<internal::SchemaState>("read schema version", [&] {
    pqxx::nontransaction tx(conn);
    internal::SchemaState state;
    if (tx.exec1("SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname "
                 "= 'sqlgroup' AND tablename = 'schema_migrations'")[0]
            .as<int>() == 0) {
      return state;
    }
    state.version = tx.exec1(
                          "SELECT coalesce(max(version), 0) FROM "
                          "sqlgroup.schema_migrations")[0]
                        .as<int>();
    state.members_from = state.version;
    if (state.version >= internal::kVersionsRecordedFrom) {
      state.members_from =
          tx.exec1("SELECT sqlgroup.members_from()")[0].as<int>();
    }
    return state;
  });
}

std::vector<MemberVersion> MembersOlderThan(pqxx::transaction_base& tx,
                                            int db_version, int needed) {
  std::vector<MemberVersion> out;
  if (db_version == 0) return out;  // no schema yet
  const bool recorded = db_version >= internal::kVersionsRecordedFrom;
  const int unrecorded_knows = std::min(db_version, kLastUnrecorded);
  const std::string sql = absl::StrCat(
      "SELECT s.id::text, s.group_name, s.host, s.pid, "
      "coalesce(s.instance, ''), ",
      recorded ? "coalesce(s.member_version, ''), coalesce(s.member_schema, 0)"
               : "'', 0",
      ", ",
      db_version >= kAwayFrom ? "coalesce(s.away_until > clock_timestamp(), "
                                "false)"
                              : "false",
      " FROM sqlgroup.sessions s JOIN sqlgroup.groups g "
      "ON g.name = s.group_name WHERE ",
      db_version >= kAwayFrom
          ? kAlive
          : "s.heartbeated_at > clock_timestamp() - g.session_ttl",
      " ORDER BY s.group_name, s.id");
  for (const pqxx::row& row : tx.exec(sql)) {
    MemberVersion m;
    m.session = row[0].as<std::string>();
    m.group = row[1].as<std::string>();
    m.host = row[2].as<std::string>();
    m.pid = row[3].as<int>();
    m.instance = row[4].as<std::string>();
    m.version = row[5].as<std::string>();
    m.schema = row[6].as<int>();
    m.away = row[7].as<bool>();
    m.knows = m.schema > 0 ? m.schema : unrecorded_knows;
    if (m.knows < needed) out.push_back(std::move(m));
  }
  return out;
}

absl::StatusOr<std::vector<MemberVersion>> MembersOlderThan(
    pqxx::connection& conn, int db_version, int needed) {
  return GuardOr<std::vector<MemberVersion>>("read members' versions", [&] {
    pqxx::nontransaction tx(conn);
    return MembersOlderThan(tx, db_version, needed);
  });
}

void FenceMembers(pqxx::work& tx, int db_version,
                  const std::vector<MemberVersion>& members) {
  std::map<std::string, bool> groups;
  for (const MemberVersion& m : members) {
    if (tx.exec_params("DELETE FROM sqlgroup.sessions WHERE id = $1::uuid",
                       m.session)
            .affected_rows() == 0) {
      continue;  // gone meanwhile
    }
    // The ownership history exists from schema 3. A static member away
    // drained its parts before it stopped: its takes end clean.
    if (db_version >= 3) {
      ReleaseSessionHistory(tx, m.session, m.away ? "away" : "fenced");
    }
    groups[m.group] = true;
  }
  for (const auto& [group, unused] : groups) {
    Notify(tx, MembershipChanged(group));
  }
}

absl::Status RecordMemberVersion(pqxx::connection& conn,
                                 const std::string& session) {
  return Guard("record the member's version", [&] {
    pqxx::nontransaction tx(conn);
    tx.exec_params(
        "UPDATE sqlgroup.sessions SET member_version = $2, member_schema = $3 "
        "WHERE id = $1::uuid",
        session, std::string(kVersion), kSchemaVersion);
  });
}

}  // namespace sqlgroup::store
