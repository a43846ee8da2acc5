#include "store/pg_membership_store.h"

#include <pqxx/connection>
#include <utility>

#include "store/grant_check.h"
#include "store/member_store.h"
#include "store/member_versions.h"

namespace sqlgroup::store {
namespace {

// Runs `statement` on the connection `get` returns; UNAVAILABLE without
// one (the member drops and reopens it on that status).
template <typename Statement>
auto OnConnection(const std::function<pqxx::connection*()>& get,
                  Statement statement)
    -> decltype(statement(std::declval<pqxx::connection&>())) {
  pqxx::connection* conn = get();
  if (conn == nullptr) {
    return absl::UnavailableError("the control connection is not open");
  }
  return statement(*conn);
}

// `r`, unless NOT_FOUND for a group that is only hidden from the role
// (its groups changed while the member ran): then the refusal that names
// the grant, which stops the member.
template <typename T>
absl::StatusOr<T> HiddenOrGone(pqxx::connection& c, const std::string& group,
                               absl::StatusOr<T> r) {
  if (!absl::IsNotFound(r.status())) return r;
  return MissingOrNotGranted(c, "member", group, r.status());
}

}  // namespace

absl::StatusOr<GroupSettings> PgMembershipStore::ReadGroup(
    const std::string& group) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return HiddenOrGone(c, group, store::ReadGroup(c, group));
  });
}

absl::StatusOr<Registered> PgMembershipStore::RegisterSession(
    const std::string& group, const SessionInfo& info, bool notify) {
  absl::StatusOr<Registered> registered =
      OnConnection(connection_, [&](pqxx::connection& c) {
        return HiddenOrGone(c, group,
                            store::RegisterSession(c, group, info, notify));
      });
  if (registered.ok() && !info.secret.empty()) {
    absl::MutexLock lock(&mu_);
    // One live session per group: an earlier one of the group was lost.
    std::erase_if(secrets_, [&](const auto& entry) {
      return entry.second.group == group;
    });
    secrets_[registered->session] = {group, info.secret};
  }
  return registered;
}

absl::StatusOr<std::optional<std::string>> PgMembershipStore::StaticHolder(
    const std::string& group, const std::string& instance) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return store::StaticHolder(c, group, instance);
  });
}

absl::StatusOr<std::optional<Beat>> PgMembershipStore::Heartbeat(
    const std::string& session, bool watch) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return store::Heartbeat(c, session, watch);
  });
}

absl::StatusOr<std::vector<std::string>> PgMembershipStore::ReapExpired(
    const std::string& group, bool notify, absl::Time deadline) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return store::ReapExpired(c, group, notify, deadline);
  });
}

absl::StatusOr<GroupView> PgMembershipStore::ReadGroupView(
    const std::string& group, const std::string& session) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return HiddenOrGone(c, group, store::ReadGroupView(c, group, session));
  });
}

absl::StatusOr<std::vector<Owner>> PgMembershipStore::TakeParts(
    const std::string& group, const std::string& session,
    const std::vector<int>& parts, int parts_of) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return store::TakeParts(c, group, session, parts, parts_of);
  });
}

absl::StatusOr<std::vector<int>> PgMembershipStore::DropParts(
    const std::string& group, const std::string& session,
    const std::vector<int>& parts, int parts_of, bool notify,
    const std::vector<std::string>& wake) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return store::DropParts(c, group, session, parts, parts_of, notify, wake);
  });
}

absl::Status PgMembershipStore::MarkRevoking(const std::string& group,
                                             const std::string& session,
                                             const std::vector<int>& parts,
                                             int parts_of, bool revoking) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return store::MarkRevoking(c, group, session, parts, parts_of, revoking);
  });
}

absl::Status PgMembershipStore::ReportConnections(const std::string& session,
                                                  int connections, int budget) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return store::ReportConnections(c, session, connections, budget);
  });
}

absl::Status PgMembershipStore::StepAway(const std::string& group,
                                         const std::string& session,
                                         bool notify) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return store::StepAway(c, group, session, notify);
  });
}

absl::Status PgMembershipStore::LeaveSession(const std::string& group,
                                             const std::string& session,
                                             bool notify) {
  std::string secret;
  {
    absl::MutexLock lock(&mu_);
    const auto it = secrets_.find(session);
    if (it != secrets_.end()) secret = it->second.secret;
  }
  absl::Status left = OnConnection(connection_, [&](pqxx::connection& c) {
    return store::LeaveSession(c, group, session, notify, secret);
  });
  if (left.ok()) {
    absl::MutexLock lock(&mu_);
    secrets_.erase(session);
  }
  return left;
}

absl::StatusOr<int64_t> PgMembershipStore::PruneOwnershipLog(
    const std::string& group, absl::Duration retention, int limit) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return store::PruneOwnershipLog(c, group, retention, limit);
  });
}

absl::StatusOr<internal::SchemaState> PgMembershipStore::ReadSchema() {
  return OnConnection(connection_,
                      [&](pqxx::connection& c) { return ReadSchemaState(c); });
}

absl::Status PgMembershipStore::RecordVersion(const std::string& session) {
  return OnConnection(connection_, [&](pqxx::connection& c) {
    return RecordMemberVersion(c, session);
  });
}

}  // namespace sqlgroup::store
