// `sqlgroup`: the command-line front end of the library. Exit codes: 0 ok,
// 1 the operation failed, 2 the command line was wrong.
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/handlers/http_handler.h"
#include "spdlog/spdlog.h"
#include "sqlgroup/version.h"
#include "url_secrets.h"

int main(int argc, char** argv) {
  // A handler process that exits or an endpoint that hangs up is an error
  // to report on that item, not a signal that ends sqlgroup.
  signal(SIGPIPE, SIG_IGN);
  sqlgroup::cli::InitHttpClient();  // before any thread
  absl::SetProgramUsageMessage(sqlgroup::cli::UsageText());

  auto cl = sqlgroup::cli::ReadCommandLine(
      std::vector<std::string>(argv + 1, argv + argc),
      sqlgroup::cli::KnownFlags());
  if (!cl.ok()) {
    std::fprintf(stderr, "sqlgroup: %s\n",
                 std::string(cl.status().message()).c_str());
    return 2;
  }
  if (cl->help) {
    std::fputs(sqlgroup::cli::CommandHelp(cl->words).c_str(), stdout);
    return 0;
  }
  if (cl->version) {
    // "sqlgroup 0.15.0 (schema 15; runs against schemas 13 to 15)"
    std::printf("sqlgroup %s (schema %d; runs against schemas %d to %d)\n",
                sqlgroup::kVersion, sqlgroup::kSchemaVersion,
                sqlgroup::kOldestServedSchema, sqlgroup::kSchemaVersion);
    return 0;
  }
  sqlgroup::cli::AddEnvironmentFlags(
      *cl, sqlgroup::cli::EnvironmentFlagsOfCommand(cl->words),
      [](const std::string& name) { return std::getenv(name.c_str()); });
  if (const absl::Status s = sqlgroup::cli::CheckFlagValues(*cl); !s.ok()) {
    std::fprintf(stderr, "sqlgroup: %s\n%s", std::string(s.message()).c_str(),
                 sqlgroup::cli::UsageReminder(cl->words).c_str());
    return 2;
  }
  std::vector<char*> args = {argv[0]};
  for (std::string& a : cl->args) args.push_back(a.data());
  sqlgroup::cli::RecordGivenFlags(static_cast<int>(args.size()), args.data());
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  const auto level = spdlog::level::from_str(absl::GetFlag(FLAGS_log_level));
  if (level == spdlog::level::off && absl::GetFlag(FLAGS_log_level) != "off") {
    const std::string message = sqlgroup::cli::NameTheEnvironment(
        *cl, absl::StrCat("--log_level=", absl::GetFlag(FLAGS_log_level),
                          " is not one of trace, debug, info, warn, error, "
                          "off"));
    std::fprintf(stderr, "sqlgroup: %s\n", message.c_str());
    return 2;
  }
  spdlog::set_level(level);
  std::vector<std::string> words(positional.begin() + 1, positional.end());
  const absl::Status s = sqlgroup::cli::RunCommand(words);
  if (s.ok()) return 0;
  if (absl::IsInvalidArgument(s)) {
    std::fprintf(stderr, "sqlgroup: %s\n",
                 sqlgroup::MaskUrlsIn(sqlgroup::cli::NameTheEnvironment(
                                          *cl, std::string(s.message())))
                     .c_str());
    // A message that is the usage line already needs no reminder.
    if (!absl::StartsWith(s.message(), "usage:")) {
      std::fprintf(stderr, "%s", sqlgroup::cli::UsageReminder(words).c_str());
    }
    return 2;
  }
  // A URL's password or token in a message (a handler's) is not shown.
  std::fprintf(stderr, "sqlgroup: %s\n",
               sqlgroup::MaskUrlsIn(s.message()).c_str());
  return 1;
}
