#include "cli/handlers/in_flight_calls.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sqlgroup::cli {
namespace {

thread_local const InFlightCalls::Call* current_call = nullptr;

}  // namespace

InFlightCalls::Call::Call(InFlightCalls* calls, std::string session, int part)
    : calls_(calls),
      session_(std::move(session)),
      part_(part),
      outer_(current_call) {
  current_call = this;
  if (calls_ == nullptr) return;
  absl::MutexLock lock(&calls_->mu_);
  calls_->calls_.insert(this);
}

InFlightCalls::Call::~Call() {
  current_call = outer_;
  if (calls_ == nullptr) return;
  absl::MutexLock lock(&calls_->mu_);
  calls_->calls_.erase(this);
}

const InFlightCalls::Call* InFlightCalls::Call::Current() {
  return current_call;
}

int InFlightCalls::CutOff(const std::string& session,
                          const std::vector<int>& parts) {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (Call* call : calls_) {
    if (call->session_ != session ||
        std::find(parts.begin(), parts.end(), call->part_) == parts.end()) {
      continue;
    }
    if (!call->cut_.exchange(true)) ++n;
  }
  return n;
}

int InFlightCalls::CutOffAll() {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (Call* call : calls_) {
    if (!call->cut_.exchange(true)) ++n;
  }
  return n;
}

absl::Status CutOffError(const std::string& what) {
  return absl::CancelledError(absl::StrCat(
      what,
      " was cut off before it returned: its part was being handed over or "
      "its member stopping and it ran past --drain_timeout, a second stop "
      "signal came, or its member lost the part"));
}

bool CutOffNow() {
  const InFlightCalls::Call* call = InFlightCalls::Call::Current();
  return call != nullptr && call->cut().load();
}

Handler Interruptible(Handler handler, std::shared_ptr<InFlightCalls> calls) {
  if (!calls) return handler;
  return [handler = std::move(handler), calls = std::move(calls)](
             const Item& item, AckTransaction& ack) {
    InFlightCalls::Call call(calls.get(), item.session, item.part);
    return handler(item, ack);
  };
}

}  // namespace sqlgroup::cli
