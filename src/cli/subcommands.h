// The larger subcommands, one file each; commands.cc dispatches to them.
#ifndef SQLGROUP_CLI_SUBCOMMANDS_H_
#define SQLGROUP_CLI_SUBCOMMANDS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sqlgroup/admin.h"

namespace spdlog {
class logger;
}

namespace sqlgroup::cli {

using Args = std::vector<std::string>;

absl::Status RunConsume(const Args& args);
absl::Status RunProduce(const Args& args);
absl::Status RunDemo(const Args& args);
absl::Status RunPostgres(const Args& args);
// Operating the items (operate_commands.cc).
absl::Status RunDeadList(const Args& args);
absl::Status RunDeadShow(const Args& args);
absl::Status RunDeadRequeue(const Args& args);
absl::Status RunDeadPurge(const Args& args);
absl::Status RunItemsList(const Args& args);
absl::Status RunItemsShow(const Args& args);
absl::Status RunItemsCancel(const Args& args);
absl::Status RunGroupPause(const Args& args);
absl::Status RunGroupResume(const Args& args);
// Topics (topic_commands.cc).
absl::Status RunTopicCreate(const Args& args);
absl::Status RunTopicDelete(const Args& args);
absl::Status RunTopicList(const Args& args);
absl::Status RunTopicDescribe(const Args& args);

// An Admin on --dsn (commands.cc).
absl::StatusOr<std::unique_ptr<Admin>> ConnectAdmin();
// `text` on stdout, flushed.
void Print(const std::string& text);

// The CLI's logger: stderr, level from --log_level.
std::shared_ptr<spdlog::logger> CliLogger();

// --group, required by produce and consume.
absl::Status RequireGroupFlag();

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_SUBCOMMANDS_H_
