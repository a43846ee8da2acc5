// The command line as people type it: dashed flags, typos, help, the
// environment; and the server versions sqlgroup accepts.
#include "cli/command_line.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "cli/commands.h"
#include "store/migrator.h"

namespace sqlgroup::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ReadCommandLine, DashedFlagsAreTheUnderscoredOnes) {
  auto cl = ReadCommandLine(
      {"consume", "--metrics-addr", "127.0.0.1:0", "--group=g",
       "--static-timeout=10s", "-log-level", "warn", "--no-notify"},
      KnownFlags());
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_THAT(cl->args, ElementsAre("consume", "--metrics_addr=127.0.0.1:0",
                                    "--group=g", "--static_timeout=10s",
                                    "--log_level=warn", "--nonotify"));
  EXPECT_THAT(cl->words, ElementsAre("consume"));
  EXPECT_FALSE(cl->help);
}

TEST(ReadCommandLine, AFlagsValueIsNotACommandWord) {
  auto cl = ReadCommandLine(
      {"--dsn", "host=x", "group", "--json", "describe", "--parts", "-3", "g"},
      KnownFlags());
  ASSERT_TRUE(cl.ok());
  EXPECT_THAT(cl->words, ElementsAre("group", "describe", "g"));
  // Values are kept as typed, dashes and all, joined to their flag so that
  // one beginning with a dash is a value too.
  auto v = ReadCommandLine({"consume", "--instance", "pod-a-1"}, KnownFlags());
  EXPECT_THAT(v->args, ElementsAre("consume", "--instance=pod-a-1"));
  auto in = ReadCommandLine({"produce", "--input", "-"}, KnownFlags());
  EXPECT_THAT(in->args, ElementsAre("produce", "--input=-"));
  // After "--", nothing is a flag.
  auto rest = ReadCommandLine({"group", "create", "--", "--weird"}, {});
  EXPECT_THAT(rest->words, ElementsAre("group", "create", "--weird"));
}

TEST(ReadCommandLine, AMisspeltFlagNamesTheClosestOne) {
  auto cl = ReadCommandLine({"consume", "--metrcs-addr", ":1"}, KnownFlags());
  EXPECT_EQ(cl.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cl.status().message(),
              HasSubstr("unknown flag --metrcs-addr; did you mean "
                        "--metrics_addr?"));
  auto far = ReadCommandLine({"migrate", "--frobnicate"}, KnownFlags());
  EXPECT_THAT(far.status().message(), HasSubstr("unknown flag --frobnicate"));
  EXPECT_THAT(far.status().message(), Not(HasSubstr("did you mean")));
}

TEST(ReadCommandLine, HelpIsAskedForInEachSpelling) {
  for (const std::vector<std::string>& argv :
       std::vector<std::vector<std::string>>{{"consume", "--help"},
                                             {"consume", "-h"},
                                             {"help", "consume"},
                                             {"--helpshort", "consume"}}) {
    auto cl = ReadCommandLine(argv, KnownFlags());
    ASSERT_TRUE(cl.ok());
    EXPECT_TRUE(cl->help) << argv[0];
    EXPECT_THAT(cl->words, ElementsAre("consume")) << argv[0];
  }
}

TEST(CommandHelp, ListsTheCommandsFlagsWithDefaultsAndVariables) {
  const std::string help = CommandHelp({"consume"});
  EXPECT_THAT(help, HasSubstr("usage: sqlgroup consume --group NAME"));
  EXPECT_THAT(help, HasSubstr("--workers (default 2; $SQLGROUP_WORKERS)"));
  EXPECT_THAT(help, HasSubstr("--handler_timeout (default 30s;"));
  EXPECT_THAT(help, HasSubstr("--dsn (default \"\"; $SQLGROUP_DSN)"));
  EXPECT_THAT(help, Not(HasSubstr("--parts")));  // group create's
  EXPECT_THAT(CommandHelp({"group", "create"}),
              HasSubstr("--parts (default 16; $SQLGROUP_PARTS)"));
  EXPECT_THAT(CommandHelp({"nonsense"}), HasSubstr("Commands:"));
}

TEST(AddEnvironmentFlags, FillWhatTheCommandLineLeavesOut) {
  const std::map<std::string, std::string> env = {
      {"SQLGROUP_WORKERS", "8"},
      {"SQLGROUP_GROUP", "from-env"},
      {"SQLGROUP_PARTS", "7"}};
  auto cl = ReadCommandLine({"consume", "--group", "given"}, KnownFlags());
  AddEnvironmentFlags(*cl, {"group", "workers"},
                      [&](const std::string& name) -> const char* {
                        auto it = env.find(name);
                        return it == env.end() ? nullptr : it->second.c_str();
                      });
  // Workers from the environment, first, so the command line wins; the
  // group given stays; PARTS is not a flag of the command.
  EXPECT_THAT(cl->args, ElementsAre("--workers=8", "consume", "--group=given"));
}

// A value each kind of flag cannot read: a sentence naming the flag and
// what its value must look like, never Abseil's "Illegal value".
TEST(CheckFlagValues, ABadValueOfEachKindIsASentenceNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"group", "create", "g", "--ttl", "5"}, "--ttl=5: expected a duration"},
      {{"group", "create", "g", "--ttl=soon"}, "such as 5s, 500ms or 1m30s"},
      {{"group", "create", "g", "--parts", "abc"},
       "--parts=abc: expected a whole number"},
      {{"consume", "--workers=2.5"}, "--workers=2.5: expected a whole number"},
      {{"consume", "--fail_rate", "lots"},
       "--fail_rate=lots: expected a number"},
      {{"consume", "--notify=maybe"}, "--notify=maybe: expected true or false"},
      {{"consume", "--drain-timeout", "1"}, "--drain_timeout=1: expected"},
  };
  for (const auto& [argv, want] : bad) {
    auto cl = ReadCommandLine(argv, KnownFlags());
    ASSERT_TRUE(cl.ok()) << cl.status();
    const absl::Status s = CheckFlagValues(*cl);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << want;
    EXPECT_THAT(s.message(), HasSubstr(want));
    EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("Illegal value")));
  }
  for (const std::vector<std::string>& argv :
       std::vector<std::vector<std::string>>{
           {"group", "create", "g", "--ttl", "5s", "--parts", "8"},
           {"consume", "--fail_rate=0.5", "--notify=false", "--nonotify"},
           {"consume", "--instance", "5"}}) {
    auto cl = ReadCommandLine(argv, KnownFlags());
    ASSERT_TRUE(cl.ok());
    EXPECT_TRUE(CheckFlagValues(*cl).ok()) << argv.back();
  }
}

TEST(CheckFlagValues, AValueFromTheEnvironmentNamesItsVariable) {
  auto cl = ReadCommandLine({"group", "create", "g"}, KnownFlags());
  AddEnvironmentFlags(*cl, {"ttl"}, [](const std::string& name) -> const char* {
    return name == "SQLGROUP_TTL" ? "5" : nullptr;
  });
  const absl::Status s = CheckFlagValues(*cl);
  EXPECT_THAT(s.message(), HasSubstr("--ttl=5 (from $SQLGROUP_TTL): expected "
                                     "a duration"));
}

TEST(UsageReminder, OnlyTheCommandsLine) {
  const std::string reminder = UsageReminder({"group", "create", "g"});
  EXPECT_THAT(reminder, HasSubstr("usage: sqlgroup group create NAME"));
  EXPECT_THAT(reminder, HasSubstr("`sqlgroup group create --help`"));
  EXPECT_THAT(reminder, ::testing::Not(HasSubstr("Commands:")));
  EXPECT_THAT(UsageReminder({}), HasSubstr("Commands:"));
}

TEST(ClosestFlag, OnlyLikelyTypos) {
  const std::vector<std::string> flags = {"workers", "members", "group",
                                          "metrics_addr", "max_attempts"};
  EXPECT_EQ(ClosestFlag("worker", flags), "workers");
  EXPECT_EQ(ClosestFlag("grop", flags), "group");
  EXPECT_EQ(ClosestFlag("metricsaddr", flags), "metrics_addr");
  EXPECT_EQ(ClosestFlag("zzzzzz", flags), "");
}

TEST(ServerVersion, FourteenAndNewerAreSupported) {
  for (int ok : {140000, 140023, 150018, 180004, 190000}) {
    EXPECT_TRUE(store::CheckServerVersionNumber(ok).ok()) << ok;
  }
  const absl::Status old = store::CheckServerVersionNumber(130023);
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.message(),
              HasSubstr("the server runs PostgreSQL 13.23; "
                        "sqlgroup needs PostgreSQL 14 or newer"));
  EXPECT_THAT(store::CheckServerVersionNumber(90624).message(),
              HasSubstr("PostgreSQL 9.6.24"));
}

}  // namespace
}  // namespace sqlgroup::cli
