#include "member/circuit_breaker.h"

#include <algorithm>

#include "sqlgroup/item.h"

namespace sqlgroup {

bool IsOutageFailure(const absl::Status& status) {
  if (IsDeadLetterVerdict(status)) return false;  // the item's own
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

const char* CircuitStateName(CircuitBreaker::State state) {
  switch (state) {
    case CircuitBreaker::State::kClosed:
      return "closed";
    case CircuitBreaker::State::kOpen:
      return "open";
    case CircuitBreaker::State::kHalfOpen:
      return "half-open";
  }
  return "?";
}

CircuitBreaker::Admission CircuitBreaker::Admit(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (!open_) return Admission::kAdmitted;
  if (now < open_until_ || probing_) return Admission::kDenied;
  probing_ = true;  // the one call that tries the dependency again
  return Admission::kProbe;
}

void CircuitBreaker::Abandon() {
  absl::MutexLock lock(&mu_);
  probing_ = false;
}

std::optional<CircuitBreaker::Change> CircuitBreaker::Record(
    absl::Time now, const absl::Status& status, const std::string& item_id) {
  absl::MutexLock lock(&mu_);
  if (absl::IsCancelled(status)) {  // cut off: it says nothing either way
    probing_ = false;
    return std::nullopt;
  }
  if (!IsOutageFailure(status)) {
    // A success, or an answer about the item itself: what the handler
    // depends on works.
    failures_ = 0;
    two_items_ = false;
    if (!open_) return std::nullopt;
    open_ = false;
    probing_ = false;
    Change change;
    change.to = State::kClosed;
    change.was_open = now - opened_at_;
    return change;
  }
  if (open_) {
    // The probe failed: wait longer. (A call that was in flight when the
    // circuit opened changes nothing.)
    if (!probing_) return std::nullopt;
    probing_ = false;
    ++failures_;
    return Open(now, std::min(wait_ * 2, options_.max_wait), status, false);
  }
  if (failures_ == 0) {
    first_item_ = item_id;
  } else if (item_id != first_item_) {
    two_items_ = true;
  }
  ++failures_;
  if (failures_ < options_.trip_after || !two_items_) return std::nullopt;
  open_ = true;
  opened_at_ = now;
  return Open(now, options_.first_wait, status, true);
}

CircuitBreaker::Change CircuitBreaker::Open(absl::Time now, absl::Duration wait,
                                            const absl::Status& status,
                                            bool first) {
  wait_ = wait;
  open_until_ = now + wait;
  Change change;
  change.to = State::kOpen;
  change.open_until = open_until_;
  change.failures = failures_;
  change.error = std::string(status.message());
  change.first = first;
  return change;
}

CircuitBreaker::State CircuitBreaker::state(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  if (!open_) return State::kClosed;
  return now < open_until_ ? State::kOpen : State::kHalfOpen;
}

absl::Time CircuitBreaker::NoCallBefore(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  if (!open_) return absl::InfinitePast();
  if (now < open_until_) return open_until_;
  return probing_ ? absl::InfiniteFuture() : absl::InfinitePast();
}

absl::Time CircuitBreaker::open_until() const {
  absl::MutexLock lock(&mu_);
  return open_until_;
}

}  // namespace sqlgroup
