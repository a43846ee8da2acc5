// The command line as people type it, made ready for Abseil's parser:
// dashed flag names (--metrics-addr) are taken as the underscored ones, a
// misspelt flag is refused naming the closest real one, `COMMAND --help`
// (or `help COMMAND`) asks for that command's help, and flags the command
// takes can come from the environment (SQLGROUP_ + the upper-case name).
//
//   auto cl = ReadCommandLine({"consume", "--metrics-addr", "0.0.0.0:9464"});
//   // cl->args == {"consume", "--metrics_addr=0.0.0.0:9464"}
#ifndef SQLGROUP_CLI_COMMAND_LINE_H_
#define SQLGROUP_CLI_COMMAND_LINE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sqlgroup::cli {

struct CommandLine {
  std::vector<std::string> args;   // argv[1..], for Abseil to parse
  std::vector<std::string> words;  // the words that are not flags
  bool help = false;               // --help, -h, --helpshort or `help`
  bool version = false;            // --version or `version`
  // Flags AddEnvironmentFlags took from the environment.
  std::vector<std::string> from_environment;
};

// Checks the value of every flag in `cl.args` as its type reads it (a
// duration, a number, a bool): INVALID_ARGUMENT with a sentence naming the
// flag, what its value must look like, and the variable when the value
// came from the environment. Abseil's own errors name neither.
absl::Status CheckFlagValues(const CommandLine& cl);

// `message` (about a value a command refused), with the environment
// variable named for each flag it names whose value came from there:
// "--pool_mode must be ... (--pool_mode came from $SQLGROUP_POOL_MODE)".
std::string NameTheEnvironment(const CommandLine& cl, std::string message);

// INVALID_ARGUMENT for a flag no command knows, with the closest of
// `known` when one is close.
absl::StatusOr<CommandLine> ReadCommandLine(
    const std::vector<std::string>& argv,
    const std::vector<std::string>& known);

// For each of `flags` not on the command line whose environment variable
// (SQLGROUP_ + the name in upper case) is set, puts --name=value before
// the command line's own flags: a flag given overrides the environment.
void AddEnvironmentFlags(
    CommandLine& cl, const std::vector<std::string>& flags,
    const std::function<const char*(const std::string&)>& getenv);

// The environment variable of a flag: SQLGROUP_METRICS_ADDR.
std::string EnvironmentName(const std::string& flag);

// The one of `candidates` closest to `name` by edit distance, if close
// enough to be a likely typo (at most 2 edits, or a third of the name);
// empty if none is.
std::string ClosestFlag(const std::string& name,
                        const std::vector<std::string>& candidates);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_COMMAND_LINE_H_
