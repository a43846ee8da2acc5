#include "sqlgroup/admin.h"

#include "absl/strings/str_cat.h"
#include "admin_impl.h"
#include "grants.h"
#include "keyspace.h"
#include "migrations.h"
#include "sqlgroup/assignor.h"
#include "sqlgroup/version.h"
#include "status_macros.h"
#include "store/db_connection.h"
#include "store/describe_store.h"
#include "store/grant_check.h"
#include "store/group_store.h"
#include "store/schema_store.h"
#include "store/topic_store.h"

namespace sqlgroup {
namespace {

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

const char* OnDeadName(OnDead on_dead) {
  switch (on_dead) {
    case OnDead::kRelease:
      return "release";
    case OnDead::kHold:
      return "hold";
  }
  return "unknown";
}

absl::StatusOr<OnDead> ParseOnDead(const std::string& text) {
  for (OnDead o : {OnDead::kRelease, OnDead::kHold}) {
    if (text == OnDeadName(o)) return o;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", text,
      "' is not an on_dead policy: use release (a key's next item goes on "
      "after one died) or hold (the key waits until its dead letter is "
      "requeued or purged)"));
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
  if (session_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ttl must be positive, got ", absl::FormatDuration(session_ttl),
        ": a member whose heartbeat is older than it is "
        "expired (5s is the default)"));
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
  if (dead_retention < absl::ZeroDuration() ||
      (dead_retention > absl::ZeroDuration() &&
       dead_retention < absl::Seconds(1))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dead_retention must be 0 (keep dead letters until they are requeued "
        "or purged) or at least 1s, got ",
        absl::FormatDuration(dead_retention)));
  }
  if (on_dead == OnDead::kHold && ordering != Ordering::kKey) {
    return absl::InvalidArgumentError(
        "on_dead hold needs ordering key: under ordering none a key's items "
        "do not wait for each other, so there is nothing to hold");
  }
  return absl::OkStatus();
}

int SchemaVersionKnown() { return internal::LatestKnownVersion(); }

Admin::Admin(AdminOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {}
Admin::~Admin() = default;

absl::StatusOr<std::unique_ptr<Admin>> Admin::Connect(AdminOptions options) {
  std::unique_ptr<Admin> admin(new Admin(std::move(options)));
  store::ConnectOptions connect;
  connect.connect_timeout = admin->options_.connect_timeout;
  connect.application_name = "sqlgroup-admin";
  store::SetPoolMode(connect, admin->options_.pool_mode);
  ASSIGN_OR_RETURN(admin->impl_->conn,
                   store::DbConnection::Open(admin->options_.dsn, connect));
  return admin;
}

absl::StatusOr<MigrateResult> Admin::Migrate(const MigrateOptions& options) {
  std::vector<internal::MigrationSource> sources;
  if (options_.migrations_dir.empty()) {
    sources = internal::EmbeddedMigrations();
  } else {
    ASSIGN_OR_RETURN(sources,
                     internal::ReadMigrationDir(options_.migrations_dir));
  }
  ASSIGN_OR_RETURN(std::vector<internal::Migration> migrations,
                   internal::ParseMigrations(sources));
  return store::MigrateSchema(*impl_->conn, migrations, options);
}

absl::StatusOr<int> Admin::SchemaVersion() {
  return store::SchemaVersion(*impl_->conn);
}

absl::Status Admin::CheckSchema() {
  return store::CheckSchema(*impl_->conn).status();
}

absl::Status Admin::CreateGroup(const GroupConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(CheckSchema());
  if (config.dead_retention > absl::ZeroDuration() ||
      config.on_dead != OnDead::kRelease) {
    RETURN_IF_ERROR(store::CheckDeadLetterPoliciesStored(*impl_->conn));
  }
  if (!config.topic.empty()) {
    // Said before the group is made; the insert subscribes it.
    RETURN_IF_ERROR(store::CheckTopicsStored(*impl_->conn));
    RETURN_IF_ERROR(
        store::ListTopics(*impl_->conn, config.topic, /*count_waiting=*/false)
            .status());
  }
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

absl::Status Admin::AlterDeadRetention(const std::string& name,
                                       absl::Duration dead_retention) {
  GroupConfig config;
  config.name = name;
  config.dead_retention = dead_retention;
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(CheckSchema());
  RETURN_IF_ERROR(store::CheckDeadLetterPoliciesStored(*impl_->conn));
  return store::UpdateDeadRetention(*impl_->conn, name, dead_retention);
}

absl::Status Admin::AlterOnDead(const std::string& name, OnDead on_dead) {
  ASSIGN_OR_RETURN(GroupConfig config, GetGroup(name));
  config.on_dead = on_dead;
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(store::CheckDeadLetterPoliciesStored(*impl_->conn));
  return store::UpdateOnDead(*impl_->conn, name, on_dead);
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
  return DeleteGroup(name, {.force = true}).status();
}

absl::StatusOr<DeletedGroup> Admin::DeleteGroup(
    const std::string& name, const DeleteGroupOptions& options) {
  RETURN_IF_ERROR(CheckSchema());
  return store::DeleteGroup(*impl_->conn, name, options.force);
}

absl::Status Admin::LeaveGroup(const std::string& group,
                               const std::string& instance,
                               const LeaveGroupOptions& options) {
  RETURN_IF_ERROR(CheckSchema());
  return store::RemoveStaticMember(*impl_->conn, group, instance,
                                   options.force);
}

absl::StatusOr<std::vector<GroupConfig>> Admin::ListGroups() {
  RETURN_IF_ERROR(CheckSchema());
  return store::ListGroupConfigs(*impl_->conn);
}

absl::Status Admin::GrantRoles(const RoleGrants& roles) {
  if (roles.member_role.empty() && roles.producer_role.empty() &&
      roles.operator_role.empty()) {
    return absl::InvalidArgumentError(
        "grant needs a member, a producer and/or an operator role");
  }
  for (const std::string& pattern : roles.groups) {
    RETURN_IF_ERROR(internal::CheckGroupPattern(pattern));
  }
  for (const std::string& pattern : roles.topics) {
    RETURN_IF_ERROR(internal::CheckTopicPattern(pattern));
  }
  if (!roles.topics.empty() && roles.producer_role.empty()) {
    return absl::InvalidArgumentError(
        "--topic says which topics a producer may publish to: give "
        "--producer_role with it");
  }
  ASSIGN_OR_RETURN(const internal::SchemaState schema,
                   store::CheckSchema(*impl_->conn));
  if (schema.version < kSchemaVersion) {
    // The grants name the columns and functions of this release's schema.
    return absl::FailedPreconditionError(absl::StrCat(
        "sqlgroup grant gives the privileges of schema ", kSchemaVersion,
        ", and the database has schema ", schema.version,
        ": run `sqlgroup migrate` first (docs/UPGRADING.md); nothing was "
        "changed"));
  }
  std::vector<std::pair<std::string, std::string>> grants;  // kind, role
  if (!roles.member_role.empty()) {
    grants.emplace_back("member", roles.member_role);
  }
  if (!roles.producer_role.empty()) {
    grants.emplace_back("producer", roles.producer_role);
  }
  if (!roles.operator_role.empty()) {
    grants.emplace_back("operator", roles.operator_role);
  }
  std::string sql;
  for (const auto& [kind, role] : grants) {
    std::vector<std::string> kinds;  // what this grant gives the role
    for (const auto& [other_kind, other] : grants) {
      if (other == role) kinds.push_back(other_kind);
    }
    const std::string revoke = absl::StrCat(
        internal::RevokeAllSql(role), internal::DropPoliciesSql(role, kinds));
    if (sql.find(revoke) == std::string::npos) absl::StrAppend(&sql, revoke);
  }
  for (const auto& [kind, role] : grants) {
    // A producer of every group publishes to every topic, unless topics
    // are named; one scoped to groups, to the topics named only.
    const std::vector<std::string> topics =
        roles.topics.empty() && roles.groups.empty()
            ? std::vector<std::string>{internal::kEveryGroup}
            : roles.topics;
    ASSIGN_OR_RETURN(std::string grant,
                     internal::GrantSql(kind, role, roles.groups, topics));
    absl::StrAppend(&sql, grant);
  }
  std::vector<std::string> names;
  for (const auto& [kind, role] : grants) names.push_back(role);
  return store::GrantPrivileges(*impl_->conn, names, sql);
}

absl::StatusOr<GroupDescription> Admin::DescribeGroup(const std::string& name,
                                                      bool count_lag) {
  absl::StatusOr<GroupConfig> got = GetGroup(name);
  if (!got.ok()) {
    // Hidden from an operator scoped to other groups, or missing.
    return store::MissingOrNotGranted(*impl_->conn, "operator", name,
                                      got.status());
  }
  GroupConfig config = std::move(*got);
  ASSIGN_OR_RETURN(const internal::SchemaState schema,
                   store::CheckSchema(*impl_->conn));
  return store::DescribeGroup(*impl_->conn, config, count_lag, schema);
}

}  // namespace sqlgroup
