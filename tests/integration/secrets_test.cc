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

#include <fstream>
#include <functional>
#include <pqxx/pqxx>
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

// The query of every table of the sqlgroup schema, as text: what the
// member role (or anyone with SELECT) could read.
std::string EveryRow(const std::string& dsn) {
  std::string out;
  pqxx::connection conn(dsn);
  pqxx::nontransaction tx(conn);
  for (const auto& table :
       tx.exec("SELECT quote_ident(table_name) FROM information_schema.tables "
               "WHERE table_schema = 'sqlgroup'")) {
    for (const auto& row :
         tx.exec(absl::StrCat("SELECT t::text FROM sqlgroup.",
                              table[0].as<std::string>(), " t"))) {
      out += row[0].as<std::string>() + "\n";
    }
  }
  return out;
}

// An http handler's URL with a password and a token: a run with dead
// letters, then with the endpoint down (the circuit opens) shows neither
// in the member's log, the tables, /metrics or describe; headers from a
// file (--handler_headers) reach the endpoint, and their value shows
// nowhere either.
TEST(HttpSecrets, AHandlerUrlsCredentialsNeverLeaveTheProcess) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  const std::vector<std::string> secrets = {"TopSecretPW", "T0kenSecret",
                                            "HeaderSecret42"};
  auto expect_none = [&](const std::string& text, const std::string& where) {
    for (const std::string& secret : secrets) {
      EXPECT_THAT(text, Not(HasSubstr(secret))) << where;
    }
  };
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(
      RunCli({"group", "create", "g", "--parts", "2", "--dsn", dsn}).exit_code,
      0);
  const std::string dir = ::testing::TempDir();
  const std::string receiver_log =
      absl::StrCat(dir, "/http-secrets-", db.name(), ".log");
  ChildProcess receiver(
      {"/usr/bin/env", "RECEIVER_AUTHORIZATION=Bearer HeaderSecret42",
       "python3", testing::SourceDir() + "/tests/support/http_receiver.py",
       receiver_log},
      receiver_log + ".out");
  std::string port;
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string out = receiver.Log();
        const size_t at = out.find("port: ");
        const size_t end = out.find('\n', at);
        if (at == std::string::npos || end == std::string::npos) return false;
        port = out.substr(at + 6, end - at - 6);
        return true;
      },
      absl::Seconds(10)));
  const std::string headers = absl::StrCat(dir, "/headers-", db.name());
  {
    std::ofstream out(headers);
    out << "# credentials for the endpoint\n"
        << "Authorization: Bearer HeaderSecret42\n";
  }
  for (const char* payload : {"ok", "dead", "ok", "dead"}) {
    ASSERT_EQ(
        RunCli({"produce", "--group", "g", "--payload", payload, "--dsn", dsn})
            .exit_code,
        0);
  }
  auto consume = [&](const std::string& url, const std::string& name,
                     const std::function<bool()>& until) {
    const std::string log = absl::StrCat(dir, "/", name, "-", db.name());
    ChildProcess member({CliPath(),
                         "consume",
                         "--group",
                         "g",
                         "--dsn",
                         dsn,
                         "--handler",
                         url,
                         "--handler_headers",
                         headers,
                         "--handler_timeout",
                         "1s",
                         "--max_attempts",
                         "1",
                         "--metrics_addr",
                         "127.0.0.1:0",
                         "--log_level",
                         "trace",
                         "--instance",
                         name},
                        log);
    EXPECT_TRUE(WaitFor(until, absl::Seconds(30))) << member.Log();
    const int metrics = MetricsPort(member.Log());
    EXPECT_GT(metrics, 0) << member.Log();
    if (metrics > 0) expect_none(Scrape(metrics), name + " /metrics");
    for (const char* json : {"", "--json"}) {
      std::vector<std::string> args = {"group", "describe", "g", "--dsn", dsn};
      if (*json) args.push_back(json);
      const auto d = RunCli(args);
      EXPECT_EQ(d.exit_code, 0) << d.err;
      expect_none(d.out + d.err, absl::StrCat(name, " describe ", json));
    }
    expect_none(EveryRow(dsn), name + " tables");
    member.Signal(SIGTERM);
    member.Wait(absl::Seconds(15));
    expect_none(member.Log(), name + " log");
    return member.Log();
  };
  auto count = [&](const std::string& sql) {
    pqxx::connection conn(dsn);
    pqxx::nontransaction tx(conn);
    return tx.exec1(sql)[0].as<int64_t>();
  };
  // Up: two acknowledged (the header reached it), two dead letters.
  const std::string up =
      consume(absl::StrCat("http://alice:TopSecretPW@127.0.0.1:", port,
                           "/ship?id=7&token=T0kenSecret"),
              "up", [&] {
                return count("SELECT count(*) FROM sqlgroup.items") == 0 &&
                       count("SELECT count(*) FROM sqlgroup.dead_items") == 2;
              });
  EXPECT_THAT(up, HasSubstr("http://alice:***@127.0.0.1:"));
  EXPECT_EQ(count("SELECT count(*) FROM sqlgroup.dead_items WHERE last_error "
                  "LIKE '%alice:***@%token=***%'"),
            2);
  // Down (nothing listens on port 1): the failures open the circuit, whose
  // error the session records.
  for (int i = 0; i < 12; ++i) {
    ASSERT_EQ(
        RunCli({"produce", "--group", "g", "--payload", "ok", "--dsn", dsn})
            .exit_code,
        0);
  }
  const std::string down =
      consume("http://alice:TopSecretPW@127.0.0.1:1/ship?token=T0kenSecret",
              "down", [&] {
                return count(
                           "SELECT count(*) FROM sqlgroup.sessions WHERE "
                           "circuit_open_since IS NOT NULL") == 1;
              });
  EXPECT_THAT(down, HasSubstr("POST http://alice:***@127.0.0.1:1/"));
}

INSTANTIATE_TEST_SUITE_P(KeywordValueAndUri, SecretsTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Uri" : "KeywordValue";
                         });

}  // namespace
}  // namespace sqlgroup
