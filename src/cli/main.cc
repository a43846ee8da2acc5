// `sqlgroup`: the command-line front end of the library. Exit codes: 0 ok,
// 1 the operation failed, 2 the command line was wrong.
#include <signal.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/handlers/http_handler.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  // A handler process that exits or an endpoint that hangs up is an error
  // to report on that item, not a signal that ends sqlgroup.
  signal(SIGPIPE, SIG_IGN);
  sqlgroup::cli::InitHttpClient();  // before any thread
  absl::SetProgramUsageMessage(sqlgroup::cli::UsageText());
  sqlgroup::cli::RecordGivenFlags(argc, argv);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const auto level = spdlog::level::from_str(absl::GetFlag(FLAGS_log_level));
  if (level == spdlog::level::off && absl::GetFlag(FLAGS_log_level) != "off") {
    std::fprintf(stderr,
                 "sqlgroup: --log_level=%s is not one of trace, debug, info, "
                 "warn, error, off\n",
                 absl::GetFlag(FLAGS_log_level).c_str());
    return 2;
  }
  spdlog::set_level(level);
  std::vector<std::string> args(positional.begin() + 1, positional.end());
  const absl::Status s = sqlgroup::cli::RunCommand(args);
  if (s.ok()) return 0;
  std::fprintf(stderr, "sqlgroup: %s\n", std::string(s.message()).c_str());
  if (absl::IsInvalidArgument(s)) {
    std::fprintf(stderr, "\n%s", sqlgroup::cli::UsageText());
    return 2;
  }
  return 1;
}
