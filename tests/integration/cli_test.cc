// The `sqlgroup` command line as a user meets it: every bad input gets a
// clear message and a non-zero exit, never a stack trace, and changes
// nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support/pg_fixture.h"
#include "support/subprocess.h"

namespace sqlgroup {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunCli;
using testing::TestDatabase;

struct BadInput {
  std::vector<std::string> args;
  int exit_code;
  const char* message;
};

TEST(Cli, BadCommandLinesFailWithAClearMessage) {
  TestDatabase db;
  TestDatabase unmigrated;
  ASSERT_EQ(RunCli({"migrate", "--dsn", db.dsn()}).exit_code, 0);
  const BadInput cases[] = {
      {{}, 2, "no command given"},
      {{"frobnicate"}, 2, "unknown command 'frobnicate'"},
      {{"group", "explode", "x"}, 2, "unknown command"},
      {{"migrate", "--no_such_flag"}, 1, "Unknown command line flag"},
      {{"group", "create", "g", "--ttl", "fivesec"}, 1, "ttl"},
      {{"group", "create", "g", "--parts", "lots"}, 1, "parts"},
      {{"group", "create", "g", "--parts", "0", "--dsn", db.dsn()},
       2,
       "parts must be between 1 and 4096"},
      {{"group", "create", "g", "--parts", "5000", "--dsn", db.dsn()},
       2,
       "parts must be between 1 and 4096"},
      {{"group", "create", "g", "--ttl", "1s", "--heartbeat", "1s", "--dsn",
        db.dsn()},
       2,
       "at most half the session ttl"},
      {{"group", "create", "--dsn", db.dsn()},
       2,
       "usage: sqlgroup group create"},
      {{"migrate", "--parts", "3"}, 2, "--parts does not apply"},
      {{"group", "describe", "nope", "--dsn", db.dsn()},
       1,
       "consumer group 'nope' does not exist"},
      {{"group", "delete", "nope", "--dsn", db.dsn()}, 1, "does not exist"},
      {{"migrate", "--dsn", db.dsn(), "--migrations_dir", "/no/such/dir"},
       1,
       "migrations folder '/no/such/dir' does not exist"},
      {{"group", "list", "--log_level", "loud"}, 2, "--log_level=loud"},
      {{"consume", "--group", "g", "--dsn", unmigrated.dsn()},
       1,
       "no sqlgroup schema: run `sqlgroup migrate`"},
      {{"group", "list", "--dsn", unmigrated.dsn()},
       1,
       "run `sqlgroup migrate`"},
      {{"consume", "--dsn", db.dsn()}, 2, "--group is required"},
      {{"consume", "--group", "g", "--handler", "explode", "--dsn", db.dsn()},
       2,
       "--handler=explode: unknown handler"},
      {{"consume", "--group", "nope", "--metrics_addr", "", "--dsn", db.dsn()},
       1,
       "consumer group 'nope' does not exist"},
      {{"produce", "--group", "g", "--count", "-1", "--dsn", db.dsn()},
       2,
       "must not be negative"},
      {{"demo", "--duration", "1s"}, 2, "--duration must be at least 10s"},
  };
  for (const BadInput& c : cases) {
    const auto r = RunCli(c.args);
    std::string shown;
    for (const auto& a : c.args) shown += a + " ";
    EXPECT_EQ(r.exit_code, c.exit_code) << shown << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << shown;
    EXPECT_THAT(r.err, Not(HasSubstr("terminate called"))) << shown;
  }
  // Nothing above created a group.
  const auto list = RunCli({"group", "list", "--dsn", db.dsn(), "--json"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(list.out, "[]\n");
}

TEST(Cli, AMetricsAddressThatCannotBeServedIsRefusedWithWhatToDo) {
  TestDatabase db;
  ASSERT_EQ(RunCli({"migrate", "--dsn", db.dsn()}).exit_code, 0);
  ASSERT_EQ(RunCli({"group", "create", "g", "--dsn", db.dsn()}).exit_code, 0);
  const auto r = RunCli({"consume", "--group", "g", "--metrics_addr",
                         "256.1.1.1:99999", "--dsn", db.dsn()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot serve metrics on 256.1.1.1:99999"));
  EXPECT_THAT(r.err, HasSubstr("port 0 lets the OS pick one"));
}

TEST(Cli, ARefusedConnectionNamesTheTargetAndHidesThePassword) {
  const auto r = RunCli({"group", "list", "--dsn",
                         "host=127.0.0.1 port=1 user=u password=hunter2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cannot connect to 'host=127.0.0.1 port=1"));
  EXPECT_THAT(r.err, HasSubstr("password=***"));
  EXPECT_THAT(r.err + r.out, Not(HasSubstr("hunter2")));
}

TEST(Cli, AServerThatNeverAnswersTimesOutInBoundedTime) {
  // A listening socket that never accepts: the TCP handshake completes in
  // the kernel but no startup reply ever comes.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 8), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string dsn = "postgresql://u:hunter2@127.0.0.1:" +
                          std::to_string(ntohs(addr.sin_port)) +
                          "/db?connect_timeout=2";
  const auto r = RunCli({"group", "list", "--dsn", dsn}, {}, absl::Seconds(30));
  close(fd);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_LT(r.elapsed, absl::Seconds(10));
  EXPECT_THAT(r.err, HasSubstr("cannot connect"));
  EXPECT_THAT(r.err, Not(HasSubstr("hunter2")));
}

TEST(Cli, TheDsnComesFromTheEnvironmentWhenNoFlagIsGiven) {
  TestDatabase db;
  const auto r = RunCli({"migrate"}, {{"SQLGROUP_DSN", db.dsn()}});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("from version 0 to 3"));
  const auto again = RunCli({"migrate"}, {{"SQLGROUP_DSN", db.dsn()}});
  EXPECT_THAT(again.out, HasSubstr("up to date at version 3"));
}

TEST(Cli, GroupCommandsRoundTrip) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  auto r = RunCli({"group", "create", "orders", "--parts", "8", "--ttl", "3s",
                   "--heartbeat", "500ms", "--dsn", dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCli({"group", "alter", "orders", "--ttl", "4s", "--dsn", dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCli({"group", "describe", "orders", "--json", "--dsn", dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"part_count\":8"));
  EXPECT_THAT(r.out, HasSubstr("\"ttl_seconds\":4.000"));
  EXPECT_THAT(r.out, HasSubstr("\"heartbeat_seconds\":0.500"));
  r = RunCli({"group", "describe", "orders", "--dsn", dsn});
  EXPECT_THAT(r.out, HasSubstr("GROUP orders  parts=8"));
  r = RunCli({"group", "delete", "orders", "--dsn", dsn});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace sqlgroup
