#include "store/connect_options.h"

#include <algorithm>
#include <utility>

namespace sqlgroup::store {

bool RefusedForGood(const absl::Status& s) {
  return s.GetPayload(kRefusedForGood).has_value();
}

bool ServerBusy(const absl::Status& s) {
  return s.GetPayload(kServerBusy).has_value();
}

absl::Duration CoordinationBound(absl::Duration ttl) {
  return std::max(ttl / 4, absl::Milliseconds(250));
}

bool EnqueueWorthRetrying(const absl::Status& s) {
  return (absl::IsUnavailable(s) && !RefusedForGood(s)) || absl::IsUnknown(s) ||
         absl::IsAborted(s) || absl::IsAlreadyExists(s);
}

ConnectOptions ProducerOptions(std::string application_name,
                               absl::Duration connect_timeout) {
  ConnectOptions options;
  options.connect_timeout = connect_timeout;
  options.application_name = std::move(application_name);
  options.statement_timeout = absl::Seconds(10);
  options.lock_timeout = absl::Seconds(10);
  options.idle_in_transaction_timeout = absl::Seconds(10);
  return options;
}

ConnectOptions CoordinationOptions(std::string application_name,
                                   absl::Duration ttl,
                                   absl::Duration connect_timeout) {
  ConnectOptions options;
  options.connect_timeout = connect_timeout;
  options.application_name = std::move(application_name);
  options.statement_timeout = CoordinationBound(ttl);
  options.lock_timeout = CoordinationBound(ttl);
  options.asynchronous_commit = true;
  return options;
}

}  // namespace sqlgroup::store
