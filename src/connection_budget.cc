#include "sqlgroup/connection_budget.h"

#include "absl/strings/str_cat.h"

namespace sqlgroup {

absl::StatusOr<std::shared_ptr<ConnectionBudget>> ConnectionBudget::Create(
    int max_connections) {
  if (max_connections < 1 || max_connections > kMaxLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_connections must be 1..", kMaxLimit, ", got ", max_connections));
  }
  return std::make_shared<ConnectionBudget>(max_connections);
}

bool ConnectionBudget::Reserve() {
  absl::MutexLock lock(&mu_);
  // Strict: a worker's slot is not taken back, so a consumer started
  // while workers hold every free slot is refused (the bound holds).
  if (reserved_ + acquired_ >= limit_) return false;
  ++reserved_;
  return true;
}

void ConnectionBudget::Unreserve() {
  absl::MutexLock lock(&mu_);
  --reserved_;
}

bool ConnectionBudget::TryAcquire(absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  if (!HasFreeSlot()) {
    if (wait <= absl::ZeroDuration()) return false;
    ++waiting_;
    const bool freed = mu_.AwaitWithTimeout(
        absl::Condition(this, &ConnectionBudget::HasFreeSlot), wait);
    --waiting_;
    if (!freed) return false;
  }
  ++acquired_;
  return true;
}

bool ConnectionBudget::contended() const {
  absl::MutexLock lock(&mu_);
  return waiting_ > 0;
}

int ConnectionBudget::worker_slots() const {
  absl::MutexLock lock(&mu_);
  return limit_ - reserved_;
}

void ConnectionBudget::Release() {
  absl::MutexLock lock(&mu_);
  --acquired_;
}

}  // namespace sqlgroup
