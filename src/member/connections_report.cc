#include "member/connections_report.h"

#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace sqlgroup {

absl::Status ConnectionsReport::Report(const std::string& session, int held,
                                       int budget) {
  if (session_ == session && held == held_ && budget == budget_) {
    return absl::OkStatus();
  }
  const absl::Time now = absl::Now();
  if (now < next_) return absl::OkStatus();
  next_ = now + interval_;
  const absl::Status s = store_.ReportConnections(session, held, budget);
  if (absl::IsFailedPrecondition(s) || absl::IsPermissionDenied(s)) {
    // A schema older than 11 has no such columns; nothing else depends on
    // them, so the member goes on without reporting.
    log_->warn("group={} cannot report its connections for describe: {}",
               group_, std::string(s.message()));
    next_ = absl::InfiniteFuture();
    return absl::OkStatus();
  }
  if (!s.ok()) return s;
  session_ = session;
  held_ = held;
  budget_ = budget;
  return absl::OkStatus();
}

}  // namespace sqlgroup
