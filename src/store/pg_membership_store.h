// MembershipStore over PostgreSQL: the member_store.h statements, run on
// whatever connection `connection()` returns at the call (the control
// connection is replaced when it breaks or a worker keeps it), UNAVAILABLE
// while there is none.
#ifndef SQLGROUP_STORE_PG_MEMBERSHIP_STORE_H_
#define SQLGROUP_STORE_PG_MEMBERSHIP_STORE_H_

#include <functional>
#include <map>
#include <pqxx/connection>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "store/membership_store.h"

namespace sqlgroup::store {

class PgMembershipStore : public MembershipStore {
 public:
  explicit PgMembershipStore(std::function<pqxx::connection*()> connection)
      : connection_(std::move(connection)) {}

  absl::StatusOr<GroupSettings> ReadGroup(const std::string& group) override;
  absl::StatusOr<Registered> RegisterSession(const std::string& group,
                                             const SessionInfo& info,
                                             bool notify) override;
  absl::StatusOr<std::optional<std::string>> StaticHolder(
      const std::string& group, const std::string& instance) override;
  absl::StatusOr<std::optional<Beat>> Heartbeat(const std::string& session,
                                                bool watch) override;
  absl::StatusOr<std::vector<std::string>> ReapExpired(
      const std::string& group, bool notify, absl::Time deadline) override;
  absl::StatusOr<GroupView> ReadGroupView(const std::string& group,
                                          const std::string& session) override;
  absl::StatusOr<std::vector<Owner>> TakeParts(const std::string& group,
                                               const std::string& session,
                                               const std::vector<int>& parts,
                                               int parts_of) override;
  absl::StatusOr<std::vector<int>> DropParts(
      const std::string& group, const std::string& session,
      const std::vector<int>& parts, int parts_of, bool notify,
      const std::vector<std::string>& wake) override;
  absl::Status MarkRevoking(const std::string& group,
                            const std::string& session,
                            const std::vector<int>& parts, int parts_of,
                            bool revoking) override;
  absl::Status ReportConnections(const std::string& session, int connections,
                                 int budget) override;
  absl::Status StepAway(const std::string& group, const std::string& session,
                        bool notify) override;
  absl::Status LeaveSession(const std::string& group,
                            const std::string& session, bool notify) override;
  absl::StatusOr<int64_t> PruneOwnershipLog(const std::string& group,
                                            absl::Duration retention,
                                            int limit) override;
  absl::StatusOr<internal::SchemaState> ReadSchema() override;
  absl::Status RecordVersion(const std::string& session) override;

 private:
  const std::function<pqxx::connection*()> connection_;
  absl::Mutex mu_;
  // The secrets of the sessions this store registered, by session id: a
  // member of a role scoped to groups needs its session's to leave.
  struct Secret {
    std::string group;
    std::string secret;
  };
  std::map<std::string, Secret> secrets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_PG_MEMBERSHIP_STORE_H_
