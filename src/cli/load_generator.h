// `sqlgroup produce --generate`: a load generator. Enqueues --count items,
// optionally keyed k0..k(K-1) (and then numbered per key, see
// numbered_items.h, for the `count` handler and the chaos checker) and
// paced, in idempotent batches that ride out restarts and failovers.
#ifndef SQLGROUP_CLI_LOAD_GENERATOR_H_
#define SQLGROUP_CLI_LOAD_GENERATOR_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "sqlgroup/pool_mode.h"

namespace sqlgroup::cli {

// Where `produce` sends items, and how long it rides out an unreachable
// database (--retry_for).
struct ProduceTarget {
  std::string dsn;
  std::string group;
  std::string topic;  // instead of group: publish (schema 20)
  PoolMode mode = PoolMode::kAuto;
  absl::Duration retry_for;
};

// Generates and sends the items that --count, --keys, --payload_bytes and
// --rate describe; prints a summary line.
absl::Status RunGenerate(const ProduceTarget& target);

// Runs `f` until it succeeds or fails for a reason other than an
// unreachable database, or `retry_for` has passed: a run that starts while
// the database restarts or fails over waits for it, as a batch does.
absl::Status RetryWhileUnavailable(absl::Duration retry_for,
                                   const std::function<absl::Status()>& f);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_LOAD_GENERATOR_H_
