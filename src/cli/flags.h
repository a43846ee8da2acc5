// The command line of `sqlgroup`: every flag, and which subcommand takes
// which. Flags are Abseil flags (global), so each subcommand lists the ones
// it accepts and anything else given is refused with a clear message.
#ifndef SQLGROUP_CLI_FLAGS_H_
#define SQLGROUP_CLI_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sqlgroup/pool_mode.h"

ABSL_DECLARE_FLAG(std::string, dsn);
ABSL_DECLARE_FLAG(std::string, migrations_dir);
ABSL_DECLARE_FLAG(bool, force);
ABSL_DECLARE_FLAG(int32_t, parts);
ABSL_DECLARE_FLAG(std::string, ordering);
ABSL_DECLARE_FLAG(std::string, assignor);
ABSL_DECLARE_FLAG(absl::Duration, static_timeout);
ABSL_DECLARE_FLAG(absl::Duration, ttl);
ABSL_DECLARE_FLAG(absl::Duration, heartbeat);
ABSL_DECLARE_FLAG(absl::Duration, dead_retention);
ABSL_DECLARE_FLAG(std::string, on_dead);
ABSL_DECLARE_FLAG(std::string, topic);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(absl::Duration, duration);
ABSL_DECLARE_FLAG(std::string, log_level);
ABSL_DECLARE_FLAG(std::string, group);
ABSL_DECLARE_FLAG(std::string, handler);
ABSL_DECLARE_FLAG(absl::Duration, handler_timeout);
ABSL_DECLARE_FLAG(absl::Duration, drain_timeout);
ABSL_DECLARE_FLAG(std::string, handler_headers);
ABSL_DECLARE_FLAG(double, fail_rate);
ABSL_DECLARE_FLAG(std::string, instance);
ABSL_DECLARE_FLAG(int32_t, workers);
ABSL_DECLARE_FLAG(int32_t, members);
ABSL_DECLARE_FLAG(int32_t, max_connections);
ABSL_DECLARE_FLAG(absl::Duration, idle_connection_timeout);
ABSL_DECLARE_FLAG(int32_t, claim_batch);
ABSL_DECLARE_FLAG(int32_t, sql_calls_per_commit);
ABSL_DECLARE_FLAG(int32_t, max_attempts);
ABSL_DECLARE_FLAG(absl::Duration, backoff_initial);
ABSL_DECLARE_FLAG(absl::Duration, backoff_max);
ABSL_DECLARE_FLAG(bool, batch);
ABSL_DECLARE_FLAG(bool, notify);
ABSL_DECLARE_FLAG(std::string, pool_mode);
ABSL_DECLARE_FLAG(std::string, listen_dsn);
ABSL_DECLARE_FLAG(std::string, key);
ABSL_DECLARE_FLAG(std::string, payload);
ABSL_DECLARE_FLAG(std::string, payload_file);
ABSL_DECLARE_FLAG(absl::Duration, delay);
ABSL_DECLARE_FLAG(std::string, input);
ABSL_DECLARE_FLAG(std::string, format);
ABSL_DECLARE_FLAG(std::string, key_delimiter);
ABSL_DECLARE_FLAG(bool, print_ids);
ABSL_DECLARE_FLAG(bool, generate);
ABSL_DECLARE_FLAG(int64_t, count);
ABSL_DECLARE_FLAG(absl::Duration, retry_for);
ABSL_DECLARE_FLAG(int32_t, keys);
ABSL_DECLARE_FLAG(int32_t, payload_bytes);
ABSL_DECLARE_FLAG(double, rate);
ABSL_DECLARE_FLAG(std::string, metrics_addr);
ABSL_DECLARE_FLAG(bool, durable);
ABSL_DECLARE_FLAG(int32_t, port);
ABSL_DECLARE_FLAG(std::string, data_dir);
ABSL_DECLARE_FLAG(bool, keep);
ABSL_DECLARE_FLAG(std::string, member_role);
ABSL_DECLARE_FLAG(std::string, producer_role);
ABSL_DECLARE_FLAG(std::string, operator_role);
ABSL_DECLARE_FLAG(std::string, error);
ABSL_DECLARE_FLAG(std::string, since);
ABSL_DECLARE_FLAG(int32_t, limit);
ABSL_DECLARE_FLAG(bool, all);
ABSL_DECLARE_FLAG(std::string, position);
ABSL_DECLARE_FLAG(bool, dry_run);
ABSL_DECLARE_FLAG(absl::Duration, older_than);
ABSL_DECLARE_FLAG(int32_t, part);

namespace sqlgroup::cli {

// The flags every subcommand takes (--dsn, --log_level).
const std::vector<std::string>& CommonFlags();

// INVALID_ARGUMENT naming the first flag given on the command line that
// `command` does not take.
absl::Status CheckFlagsApply(const std::string& command,
                             const std::vector<std::string>& allowed);

// --pool_mode; INVALID_ARGUMENT for a value it does not know.
absl::StatusOr<PoolMode> PoolModeFlag();

// Notes which flags argv names; call before absl::ParseCommandLine.
void RecordGivenFlags(int argc, char** argv);

// True when the flag was given on the command line.
bool FlagGiven(const std::string& name);

// Every value the flag was given, in order (Abseil keeps only the last):
// for flags that may be repeated, as `grant --group`.
std::vector<std::string> FlagValues(const std::string& name);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_FLAGS_H_
