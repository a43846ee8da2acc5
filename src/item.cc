#include "sqlgroup/item.h"

#include <string>

#include "absl/strings/cord.h"
#include "store/connection.h"

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
