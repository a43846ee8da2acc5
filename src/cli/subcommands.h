// The larger subcommands, one file each; commands.cc dispatches to them.
#ifndef SQLGROUP_CLI_SUBCOMMANDS_H_
#define SQLGROUP_CLI_SUBCOMMANDS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace spdlog {
class logger;
}

namespace sqlgroup::cli {

using Args = std::vector<std::string>;

absl::Status RunConsume(const Args& args);
absl::Status RunProduce(const Args& args);
absl::Status RunDemo(const Args& args);
absl::Status RunPostgres(const Args& args);

// The CLI's logger: stderr, level from --log_level.
std::shared_ptr<spdlog::logger> CliLogger();

// --group, required by produce and consume.
absl::Status RequireGroupFlag();

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_SUBCOMMANDS_H_
