// Records a member's connections and its budget in its session, for
// `group describe`: only when they changed, at most once per `interval`.
//
// Thread safety: the control thread.
#ifndef SQLGROUP_MEMBER_CONNECTIONS_REPORT_H_
#define SQLGROUP_MEMBER_CONNECTIONS_REPORT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "store/membership_store.h"

namespace spdlog {
class logger;
}

namespace sqlgroup {

class ConnectionsReport {
 public:
  ConnectionsReport(std::string group, store::MembershipStore& store,
                    std::shared_ptr<spdlog::logger> logger,
                    absl::Duration interval = absl::Seconds(1))
      : group_(std::move(group)),
        store_(store),
        log_(std::move(logger)),
        interval_(interval) {}

  // Records `held` connections of `budget` for `session` if either changed
  // since the last record (or the session did). The statement's error,
  // except for a schema without the columns or a role without the grant:
  // those are warned about once, and nothing is recorded any more.
  absl::Status Report(const std::string& session, int held, int budget);

 private:
  const std::string group_;
  store::MembershipStore& store_;
  std::shared_ptr<spdlog::logger> log_;
  const absl::Duration interval_;

  // What was last recorded, for which session.
  std::string session_;
  int held_ = -1;
  int budget_ = -1;
  absl::Time next_ = absl::InfinitePast();
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_CONNECTIONS_REPORT_H_
