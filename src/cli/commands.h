// The subcommands of `sqlgroup`. Each turns flags into library calls and
// prints the result; none holds logic of its own.
#ifndef SQLGROUP_CLI_COMMANDS_H_
#define SQLGROUP_CLI_COMMANDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace sqlgroup::cli {

// Runs the subcommand named by the positional arguments (argv[0] dropped).
// INVALID_ARGUMENT for a usage error (unknown subcommand, missing name).
absl::Status RunCommand(const std::vector<std::string>& args);

// The usage text shown by --help and on a usage error.
const char* UsageText();

// Every flag some command takes (and the common ones).
std::vector<std::string> KnownFlags();

// The flags the command named by the leading `words` takes, common ones
// included; empty when no command is named.
std::vector<std::string> FlagsOfCommand(const std::vector<std::string>& words);

// Those of FlagsOfCommand(words) that a SQLGROUP_* variable may set: not
// --dsn (ResolveDsn reads it), nor what an operation on items acts on
// (--key, --all, --error, --older_than, --since, --part of the dead,
// items and group pause/resume commands), which only the command line
// gives.
std::vector<std::string> EnvironmentFlagsOfCommand(
    const std::vector<std::string>& words);

// `sqlgroup COMMAND --help`: the command's usage and each of its flags with
// its default and meaning; the whole usage when `words` name no command.
std::string CommandHelp(const std::vector<std::string>& words);

// After a usage error: the usage line of the command `words` name and
// where its flags are listed; the commands' list when they name none.
std::string UsageReminder(const std::vector<std::string>& words);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_COMMANDS_H_
