// The statements a member's control thread runs, as an interface: the
// session (register, heartbeat, reap, leave) and its parts (read, take,
// drop). PgMembershipStore runs them over the control connection
// (member_store.h says what each does); unit tests of the member runtime
// hand in a fake. Every method returns the store's statuses: UNAVAILABLE
// when there is no connection or it broke, NOT_FOUND when the group is
// gone, FAILED_PRECONDITION for a schema that lacks what the statement
// needs.
//
// Thread safety: used by one thread, the member's control thread.
#ifndef SQLGROUP_STORE_MEMBERSHIP_STORE_H_
#define SQLGROUP_STORE_MEMBERSHIP_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "schema_skew.h"
#include "store/model.h"

namespace sqlgroup::store {

class MembershipStore {
 public:
  virtual ~MembershipStore() = default;

  virtual absl::StatusOr<GroupSettings> ReadGroup(const std::string& group) = 0;
  virtual absl::StatusOr<Registered> RegisterSession(const std::string& group,
                                                     const SessionInfo& info,
                                                     bool notify) = 0;
  virtual absl::StatusOr<std::optional<std::string>> StaticHolder(
      const std::string& group, const std::string& instance) = 0;
  // nullopt: the session expired or is gone.
  virtual absl::StatusOr<std::optional<Beat>> Heartbeat(
      const std::string& session, bool watch) = 0;
  virtual absl::StatusOr<std::vector<std::string>> ReapExpired(
      const std::string& group, bool notify, absl::Time deadline) = 0;
  virtual absl::StatusOr<GroupView> ReadGroupView(
      const std::string& group, const std::string& session) = 0;
  virtual absl::StatusOr<std::vector<Owner>> TakeParts(
      const std::string& group, const std::string& session,
      const std::vector<int>& parts, int parts_of) = 0;
  virtual absl::StatusOr<std::vector<int>> DropParts(
      const std::string& group, const std::string& session,
      const std::vector<int>& parts, int parts_of, bool notify,
      const std::vector<std::string>& wake) = 0;
  virtual absl::Status MarkRevoking(const std::string& group,
                                    const std::string& session,
                                    const std::vector<int>& parts, int parts_of,
                                    bool revoking) = 0;
  virtual absl::Status ReportConnections(const std::string& session,
                                         int connections, int budget) = 0;
  virtual absl::Status StepAway(const std::string& group,
                                const std::string& session, bool notify) = 0;
  virtual absl::Status LeaveSession(const std::string& group,
                                    const std::string& session,
                                    bool notify) = 0;
  virtual absl::StatusOr<int64_t> PruneOwnershipLog(const std::string& group,
                                                    absl::Duration retention,
                                                    int limit) = 0;
  // The database's schema version and which members it accepts
  // (schema_skew.h), read again when `sqlgroup migrate` says it changed.
  virtual absl::StatusOr<internal::SchemaState> ReadSchema() = 0;
  // Records this binary's version in `session` (schema 14 on).
  virtual absl::Status RecordVersion(const std::string& session) = 0;
};

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_MEMBERSHIP_STORE_H_
