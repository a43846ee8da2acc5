#include "cli/fleet_health.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sqlgroup::cli {
namespace {

std::string Name(size_t i, size_t n, const Consumer& c) {
  const std::string session = c.session_id();
  return absl::StrCat("member ", i + 1, " of ", n,
                      session.empty() ? "" : absl::StrCat(" (", session, ")"));
}

}  // namespace

void FleetHealth::Waiting(std::string why) {
  absl::MutexLock lock(&mu_);
  waiting_ = std::move(why);
}

void FleetHealth::Running(std::vector<const Consumer*> members) {
  absl::MutexLock lock(&mu_);
  members_ = std::move(members);
  waiting_.clear();
}

void FleetHealth::Stopping() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

absl::Status FleetHealth::Live() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> failed;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i]->state() == Consumer::State::kFailed) {
      failed.push_back(absl::StrCat(Name(i, members_.size(), *members_[i]),
                                    ": failed; the process exits"));
    }
  }
  if (failed.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrJoin(failed, "\n"));
}

absl::Status FleetHealth::Ready() const {
  absl::MutexLock lock(&mu_);
  if (!waiting_.empty()) return absl::UnavailableError(waiting_);
  if (stopping_) return absl::UnavailableError("stopping (a signal came)");
  std::vector<std::string> not_ready;
  for (size_t i = 0; i < members_.size(); ++i) {
    const Consumer& c = *members_[i];
    const std::string name = Name(i, members_.size(), c);
    switch (c.state()) {
      case Consumer::State::kRunning:
        if (c.session_id().empty()) {
          not_ready.push_back(absl::StrCat(name, ": joining (no session)"));
        } else if (c.circuit_open()) {
          not_ready.push_back(
              absl::StrCat(name,
                           ": its handler's circuit is open (it fails every "
                           "item: an outage of what it calls)"));
        }
        break;
      case Consumer::State::kCreated:
        not_ready.push_back(absl::StrCat(name, ": starting"));
        break;
      case Consumer::State::kStopping:
      case Consumer::State::kStopped:
        not_ready.push_back(absl::StrCat(name, ": stopping"));
        break;
      case Consumer::State::kFailed:
        not_ready.push_back(absl::StrCat(name, ": failed"));
        break;
    }
  }
  if (not_ready.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrJoin(not_ready, "\n"));
}

}  // namespace sqlgroup::cli
