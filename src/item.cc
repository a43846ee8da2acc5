#include "sqlgroup/item.h"

#include <string>

#include "absl/strings/cord.h"

namespace sqlgroup {
namespace {

// A payload, not a status code, marks the verdict: a handler's own code
// (say NOT_FOUND) stays as it was for whoever logs the status.
constexpr char kDeadLetterPayload[] = "sqlgroup/dead-letter";

}  // namespace

absl::Status DeadLetterVerdict(std::string_view why) {
  absl::Status s = absl::FailedPreconditionError(std::string(why));
  s.SetPayload(kDeadLetterPayload, absl::Cord("1"));
  return s;
}

bool IsDeadLetterVerdict(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kDeadLetterPayload).has_value();
}

}  // namespace sqlgroup
