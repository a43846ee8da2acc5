// Passwords never appear in what sqlgroup prints, logs or serves: command
// output, member logs (including failed reconnects), the /metrics scrape
// and describe, for keyword/value and URI connection strings alike.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "support/pg_fixture.h"
#include "support/subprocess.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using testing::ChildProcess;
using testing::CliPath;
using testing::ExecSql;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunCli;
using testing::TestDatabase;
using testing::TestRole;
using testing::WaitFor;

// GET http://127.0.0.1:port/metrics, the body and headers as one string.
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request =
        "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buf[8192];
      for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, n);
    }
  }
  close(fd);
  return out;
}

// The port a consumer logged ("metrics on http://127.0.0.1:PORT/metrics").
int MetricsPort(const std::string& log) {
  static const std::regex kLine(R"(metrics on http://127\.0\.0\.1:(\d+)/)");
  std::smatch m;
  int port = 0;
  if (std::regex_search(log, m, kLine)) {
    (void)absl::SimpleAtoi(m[1].str(), &port);
  }
  return port;
}

class SecretsTest : public ::testing::TestWithParam<bool> {
 protected:
  // The DSN of `role`: keyword/value, or a URI when the parameter says so.
  std::string DsnOf(const TestRole& role) const {
    return GetParam() ? role.Uri(db_.name()) : role.Dsn(db_.name());
  }
  // Fails the test when `text` shows either password.
  void ExpectNoPassword(const std::string& text, const std::string& where) {
    EXPECT_THAT(text, Not(HasSubstr(admin_.password()))) << where;
    EXPECT_THAT(text, Not(HasSubstr(member_.password()))) << where;
  }

  TestRole admin_, member_;  // dropped after the database
  TestDatabase db_;
};

TEST_P(SecretsTest, PasswordsNeverAppearInOutputLogsMetricsOrDescribe) {
  ExecSql(db_.dsn(), absl::StrCat("GRANT CREATE ON DATABASE ", db_.name(),
                                  " TO ", admin_.name()));
  const std::string admin = DsnOf(admin_);
  const std::vector<std::vector<std::string>> setup = {
      {"migrate"},
      {"group", "create", "g", "--parts", "4", "--ttl", "2s", "--heartbeat",
       "400ms"},
      {"grant", "--member_role", member_.name()},
      {"produce", "--group", "g", "--count", "100"},
  };
  for (std::vector<std::string> args : setup) {
    args.insert(args.end(), {"--dsn", admin, "--log_level", "trace"});
    const auto r = RunCli(args);
    ASSERT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
    ExpectNoPassword(r.out + r.err, args[0]);
  }

  const std::string log_path =
      absl::StrCat(::testing::TempDir(), "/secrets-", db_.name(), ".log");
  ChildProcess member({CliPath(), "consume", "--group", "g", "--dsn",
                       DsnOf(member_), "--metrics_addr", "127.0.0.1:0",
                       "--log_level", "trace", "--instance", "m1"},
                      log_path);
  ASSERT_TRUE(
      WaitFor([&] { return MetricsPort(member.Log()) > 0; }, absl::Seconds(10)))
      << member.Log();
  const int port = MetricsPort(member.Log());
  EXPECT_TRUE(WaitFor(
      [&] {
        return Scrape(port).find("sqlgroup_owned_parts") != std::string::npos;
      },
      absl::Seconds(10)));

  // Reconnecting with a password the server no longer takes: the failures
  // are logged, masked.
  ExecSql(db_.dsn(), absl::StrCat("ALTER ROLE ", member_.name(),
                                  " PASSWORD 'changed-meanwhile'"));
  ExecSql(db_.dsn(), absl::StrCat("SELECT pg_terminate_backend(pid) FROM "
                                  "pg_stat_activity WHERE usename = '",
                                  member_.name(), "'"));
  // Workers and the control connection reconnect on their own schedules;
  // wait for the control connection to have failed too, so its failure is
  // among the masked lines.
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string log = member.Log();
        return log.find("password authentication failed") !=
                   std::string::npos &&
               log.find("control connection failed") != std::string::npos;
      },
      absl::Seconds(20)))
      << member.Log();
  EXPECT_THAT(member.Log(),
              HasSubstr(GetParam() ? ":***@127.0.0.1" : "password=***"));
  ExecSql(db_.dsn(), absl::StrCat("ALTER ROLE ", member_.name(), " PASSWORD '",
                                  member_.password(), "'"));
  EXPECT_TRUE(WaitFor(
      [&] {
        return member.Log().find("connection restored") != std::string::npos;
      },
      absl::Seconds(20)))
      << member.Log();

  const std::string metrics = Scrape(port);
  EXPECT_THAT(metrics, HasSubstr("sqlgroup_"));
  ExpectNoPassword(metrics, "/metrics");
  for (const char* json : {"", "--json"}) {
    std::vector<std::string> args = {"group", "describe", "g", "--dsn", admin};
    if (*json) args.push_back(json);
    const auto d = RunCli(args);
    EXPECT_EQ(d.exit_code, 0) << d.err;
    EXPECT_THAT(d.out, HasSubstr("m1"));
    ExpectNoPassword(d.out + d.err, absl::StrCat("describe ", json));
  }
  // And through the environment instead of --dsn.
  const auto listed = RunCli({"group", "list", "--log_level", "trace"},
                             {{"SQLGROUP_DSN", admin}});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  ExpectNoPassword(listed.out + listed.err, "group list");

  member.Signal(SIGTERM);
  EXPECT_EQ(member.Wait(absl::Seconds(15)), 0);
  ExpectNoPassword(member.Log(), "member log");
}

INSTANTIATE_TEST_SUITE_P(KeywordValueAndUri, SecretsTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Uri" : "KeywordValue";
                         });

}  // namespace
}  // namespace sqlgroup
