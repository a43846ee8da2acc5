#include "sqlgroup/admin.h"

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grants.h"
#include "keyspace.h"
#include "sqlgroup/assignor.h"
#include "status_macros.h"
#include "store/connection.h"
#include "store/db_connection.h"
#include "store/errors.h"
#include "store/group_store.h"
#include "store/interval.h"
#include "store/item_store.h"
#include "store/member_store.h"
#include "store/schema_store.h"

namespace sqlgroup {
namespace {

using store::Guard;
using store::GuardOr;
using store::MicrosOf;
using store::PqxxOf;
using store::ToInterval;

bool ValidGroupName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-'))) {
      return false;
    }
  }
  return true;
}

// "{a,b,c}": a PostgreSQL array literal of plain tokens.
template <typename Range, typename F>
std::string ArrayLiteral(const Range& values, F&& format) {
  std::vector<std::string> parts;
  for (const auto& v : values) parts.push_back(format(v));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

}  // namespace

const char* OrderingName(Ordering ordering) {
  switch (ordering) {
    case Ordering::kKey:
      return "key";
    case Ordering::kNone:
      return "none";
  }
  return "unknown";
}

absl::StatusOr<Ordering> ParseOrdering(const std::string& text) {
  for (Ordering o : {Ordering::kKey, Ordering::kNone}) {
    if (text == OrderingName(o)) return o;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", text,
      "' is not an ordering: use key (the items of a key one at a time, in "
      "enqueue order) or none (items of a key may run concurrently)"));
}

absl::Status GroupConfig::Validate() const {
  if (!ValidGroupName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group name '", name,
        "' is invalid: use 1 to 128 letters, digits, '_', '.' or '-', "
        "starting with a letter or digit"));
  }
  if (parts < kMinParts || parts > kMaxParts) {
    return absl::InvalidArgumentError(absl::StrCat("parts must be between ",
                                                   kMinParts, " and ",
                                                   kMaxParts, ", got ", parts));
  }
  if (heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat must be positive, got ",
                     absl::FormatDuration(heartbeat_interval)));
  }
  if (heartbeat_interval * 2 > session_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat (", absl::FormatDuration(heartbeat_interval),
                     ") must be at most half the session ttl (",
                     absl::FormatDuration(session_ttl),
                     "), so one late heartbeat does not expire a live member"));
  }
  if (session_ttl > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ttl must be at most 24h, got ", absl::FormatDuration(session_ttl)));
  }
  if (ordering != Ordering::kKey && ordering != Ordering::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat("ordering must be key or none, got value ",
                     static_cast<int>(ordering)));
  }
  if (!AssignorNamed(assignor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", assignor,
        "' is not an assignor: use lexical (contiguous blocks of parts in "
        "the lexical order of the members) or sticky (balanced, moving only "
        "what a join or a leave needs)"));
  }
  return absl::OkStatus();
}

int SchemaVersionKnown() { return internal::LatestKnownVersion(); }

struct Admin::Impl {
  std::optional<store::DbConnection> conn;  // set by Connect
};

Admin::Admin(AdminOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {}
Admin::~Admin() = default;

absl::StatusOr<std::unique_ptr<Admin>> Admin::Connect(AdminOptions options) {
  std::unique_ptr<Admin> admin(new Admin(std::move(options)));
  store::ConnectOptions connect;
  connect.connect_timeout = admin->options_.connect_timeout;
  connect.application_name = "sqlgroup-admin";
  ASSIGN_OR_RETURN(admin->impl_->conn,
                   store::DbConnection::Open(admin->options_.dsn, connect));
  return admin;
}

absl::StatusOr<MigrateResult> Admin::Migrate() {
  std::vector<internal::MigrationSource> sources;
  if (options_.migrations_dir.empty()) {
    sources = internal::EmbeddedMigrations();
  } else {
    ASSIGN_OR_RETURN(sources,
                     internal::ReadMigrationDir(options_.migrations_dir));
  }
  ASSIGN_OR_RETURN(std::vector<internal::Migration> migrations,
                   internal::ParseMigrations(sources));
  return store::MigrateSchema(*impl_->conn, migrations);
}

absl::StatusOr<int> Admin::SchemaVersion() {
  return store::SchemaVersion(*impl_->conn);
}

absl::Status Admin::CheckSchema() {
  return store::CheckSchema(*impl_->conn, SchemaVersionKnown());
}

absl::Status Admin::CreateGroup(const GroupConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(CheckSchema());
  return store::InsertGroup(*impl_->conn, config);
}

absl::StatusOr<GroupConfig> Admin::GetGroup(const std::string& name) {
  RETURN_IF_ERROR(CheckSchema());
  return store::ReadGroupConfig(*impl_->conn, name);
}

absl::Status Admin::AlterGroup(
    const std::string& name, std::optional<absl::Duration> session_ttl,
    std::optional<absl::Duration> heartbeat_interval) {
  ASSIGN_OR_RETURN(GroupConfig config, GetGroup(name));
  if (session_ttl) config.session_ttl = *session_ttl;
  if (heartbeat_interval) config.heartbeat_interval = *heartbeat_interval;
  RETURN_IF_ERROR(config.Validate());
  return store::UpdateGroupTiming(*impl_->conn, name, config.session_ttl,
                                  config.heartbeat_interval);
}

absl::StatusOr<PartsChange> Admin::AlterParts(const std::string& name,
                                              int parts) {
  if (parts < 1 || parts > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("parts must be between 1 and 4096, got ", parts,
                     "; nothing was changed"));
  }
  RETURN_IF_ERROR(CheckSchema());
  return store::ChangePartCount(*impl_->conn, name, parts);
}

absl::Status Admin::DeleteGroup(const std::string& name) {
  RETURN_IF_ERROR(CheckSchema());
  return store::DeleteGroup(*impl_->conn, name);
}

absl::Status Admin::LeaveGroup(const std::string& group,
                               const std::string& instance) {
  RETURN_IF_ERROR(CheckSchema());
  return store::RemoveStaticMember(*impl_->conn, group, instance);
}

absl::StatusOr<std::vector<GroupConfig>> Admin::ListGroups() {
  RETURN_IF_ERROR(CheckSchema());
  return store::ListGroupConfigs(*impl_->conn);
}

absl::Status Admin::GrantRoles(const RoleGrants& roles) {
  if (roles.member_role.empty() && roles.producer_role.empty()) {
    return absl::InvalidArgumentError(
        "grant needs a member role and/or a producer role");
  }
  RETURN_IF_ERROR(CheckSchema());
  std::vector<std::pair<std::string, std::string>> grants;  // kind, role
  if (!roles.member_role.empty()) {
    grants.emplace_back("member", roles.member_role);
  }
  if (!roles.producer_role.empty()) {
    grants.emplace_back("producer", roles.producer_role);
  }
  std::string sql;
  for (const auto& [kind, role] : grants) {
    if (sql.find(internal::RevokeAllSql(role)) == std::string::npos) {
      absl::StrAppend(&sql, internal::RevokeAllSql(role));
    }
  }
  for (const auto& [kind, role] : grants) {
    ASSIGN_OR_RETURN(std::string grant, internal::GrantSql(kind, role));
    absl::StrAppend(&sql, grant);
  }
  std::vector<std::string> names;
  for (const auto& [kind, role] : grants) names.push_back(role);
  return store::GrantPrivileges(*impl_->conn, names, sql);
}

absl::StatusOr<GroupDescription> Admin::DescribeGroup(const std::string& name,
                                                      bool count_lag) {
  GroupDescription d;
  ASSIGN_OR_RETURN(d.config, GetGroup(name));
  const int parts = d.config.parts;
  d.parts.resize(parts);
  std::vector<int> numbers(parts);
  for (int p = 0; p < parts; ++p) {
    numbers[p] = p;
    const KeyRange r = PartRange(p, parts);
    d.parts[p].part = p;
    d.parts[p].first_key = FormatUuid(r.first);
    d.parts[p].last_key = FormatUuid(r.last);
  }
  RETURN_IF_ERROR(Guard("describe group", [&] {
    // One snapshot, so members, owners and lag agree with each other.
    pqxx::work tx(PqxxOf(*impl_->conn), "describe");
    tx.exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY");
    for (const pqxx::row& row : tx.exec_params(
             "SELECT s.id::text, coalesce(s.instance, ''), s.host, s.pid, "
             "  (extract(epoch from s.created_at) * 1000000)::bigint, " +
                 MicrosOf("clock_timestamp() - s.heartbeated_at") +
                 ", s.heartbeated_at <= clock_timestamp() - g.session_ttl "
                 "  AND coalesce(s.away_until, '-infinity') <= "
                 "clock_timestamp(), " +
                 MicrosOf("s.static_timeout") + ", " +
                 MicrosOf("s.away_until - clock_timestamp()") +
                 ", s.connections, s.connection_budget, " +
                 MicrosOf("clock_timestamp() - s.circuit_open_since") +
                 ", coalesce(s.circuit_error, '')"
                 " FROM sqlgroup.sessions s "
                 "JOIN sqlgroup.groups g ON g.name = s.group_name "
                 "WHERE s.group_name = $1 ORDER BY s.id",
             name)) {
      MemberInfo m;
      m.session_id = row[0].as<std::string>();
      m.instance = row[1].as<std::string>();
      m.host = row[2].as<std::string>();
      m.pid = row[3].as<int>();
      m.created_at = absl::FromUnixMicros(row[4].as<int64_t>());
      m.since_heartbeat = absl::Microseconds(row[5].as<int64_t>());
      m.expired = row[6].as<bool>();
      if (!row[7].is_null()) {
        m.static_timeout = absl::Microseconds(row[7].as<int64_t>());
      }
      if (!row[8].is_null() && row[8].as<int64_t>() > 0) {
        m.away_left = absl::Microseconds(row[8].as<int64_t>());
      }
      if (!row[9].is_null()) m.connections = row[9].as<int>();
      if (!row[10].is_null()) m.connection_budget = row[10].as<int>();
      if (!row[11].is_null()) {
        m.circuit_open_for = absl::Microseconds(row[11].as<int64_t>());
        m.circuit_error = row[12].as<std::string>();
      }
      d.members.push_back(std::move(m));
    }
    const pqxx::row change = tx.exec_params1(
        "SELECT g.previous_parts, (extract(epoch from g.parts_changed_at) * "
        "1000000)::bigint, (SELECT count(*) FROM sqlgroup.session_parts p "
        "  WHERE p.group_name = g.name AND p.parts_of <> g.parts) "
        "FROM sqlgroup.groups g WHERE g.name = $1",
        name);
    if (!change[0].is_null()) {
      d.last_parts_change = PartsChange{
          change[0].as<int>(), parts,
          absl::FromUnixMicros(change[1].as<int64_t>()), change[2].as<int>()};
    }
    for (const pqxx::row& row : tx.exec_params(
             "SELECT part, session_id::text, epoch, " +
                 MicrosOf("clock_timestamp() - revoking_since") +
                 " FROM sqlgroup.session_parts "
                 "WHERE group_name = $1 AND parts_of = $2 ORDER BY part",
             name, parts)) {
      const int p = row[0].as<int>();
      if (p < 0 || p >= parts) continue;
      PartInfo& info = d.parts[p];
      info.owner_session = row[1].as<std::string>();
      info.epoch = row[2].as<int64_t>();
      if (!row[3].is_null()) {
        info.revoking_for = absl::Microseconds(row[3].as<int64_t>());
      }
      for (MemberInfo& m : d.members) {
        if (m.session_id == info.owner_session) {
          m.parts.push_back(p);
          info.owner_instance = m.instance;
        }
      }
    }
    if (count_lag) {
      const auto first =
          ArrayLiteral(d.parts, [](const PartInfo& i) { return i.first_key; });
      const auto last =
          ArrayLiteral(d.parts, [](const PartInfo& i) { return i.last_key; });
      const auto nums =
          ArrayLiteral(numbers, [](int p) { return absl::StrCat(p); });
      for (const pqxx::row& row : tx.exec_params(
               "SELECT b.part, count(i.id), "
               "  coalesce(" +
                   MicrosOf("clock_timestamp() - min(i.enqueued_at)") +
                   ", 0) "
                   "FROM unnest($2::int[], $3::uuid[], $4::uuid[]) "
                   "  AS b(part, lo, hi) "
                   "LEFT JOIN sqlgroup.items i ON i.group_name = $1 "
                   "  AND i.id BETWEEN b.lo AND b.hi "
                   "GROUP BY b.part",
               name, nums, first, last)) {
        PartInfo& info = d.parts[row[0].as<int>()];
        info.waiting_items = row[1].as<int64_t>();
        info.oldest_age = absl::Microseconds(row[2].as<int64_t>());
      }
    }
    if (d.config.ordering == Ordering::kKey) {
      std::vector<KeyRange> ranges;
      for (int p = 0; p < parts; ++p) ranges.push_back(PartRange(p, parts));
      for (const store::PartBlockedRow& row :
           store::CountBlocked(tx, name, numbers, ranges)) {
        PartInfo& info = d.parts[row.part];
        info.blocked_keys = row.keys;
        info.oldest_blocked_age = row.oldest;
      }
    }
    d.dead_items =
        tx.exec_params1(
              "SELECT count(*) FROM sqlgroup.dead_items WHERE group_name = $1",
              name)[0]
            .as<int64_t>();
    tx.commit();
  }));
  return d;
}

}  // namespace sqlgroup
