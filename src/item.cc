#include "sqlgroup/item.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "store/connection.h"

namespace sqlgroup {
namespace {

// A payload, not a status code, marks the verdict: a handler's own code
// (say NOT_FOUND) stays as it was for whoever logs the status.
constexpr char kDeadLetterPayload[] = "sqlgroup/dead-letter";
// The wait asked for, in whole microseconds, as decimal text.
constexpr char kRetryAfterPayload[] = "sqlgroup/retry-after";

}  // namespace

absl::Status DeadLetterVerdict(std::string_view why) {
  absl::Status s = absl::FailedPreconditionError(std::string(why));
  s.SetPayload(kDeadLetterPayload, absl::Cord("1"));
  return s;
}

bool IsDeadLetterVerdict(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kDeadLetterPayload).has_value();
}

absl::Status RetryAfterVerdict(absl::Duration after, std::string_view why) {
  absl::Status s = absl::UnavailableError(std::string(why));
  const int64_t micros = std::max<int64_t>(0, absl::ToInt64Microseconds(after));
  s.SetPayload(kRetryAfterPayload, absl::Cord(absl::StrCat(micros)));
  return s;
}

std::optional<absl::Duration> RetryAfterOf(const absl::Status& status) {
  if (status.ok()) return std::nullopt;
  const auto payload = status.GetPayload(kRetryAfterPayload);
  int64_t micros = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &micros)) {
    return std::nullopt;
  }
  return absl::Microseconds(std::max<int64_t>(0, micros));
}

pqxx::work& AckTransaction::work() {
  if (!work_) {
    work_.emplace(conn_, "sqlgroup_ack");
    // Through a pooler in transaction mode: the worker's limits (an ack left
    // idle by a paused process ends after the TTL), for this transaction.
    store::LocalLimits(*work_);
  }
  return *work_;
}

}  // namespace sqlgroup
