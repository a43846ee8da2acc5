// The `sqlgroup` command line as a user meets it: every bad input gets a
// clear message and a non-zero exit, never a stack trace, and changes
// nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <pqxx/pqxx>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "support/db_snapshot.h"
#include "support/pg_fixture.h"
#include "support/subprocess.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using testing::ChildProcess;
using testing::CliPath;
using testing::DatabaseSnapshot;
using testing::ExecSql;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunCli;
using testing::SharedPostgres;
using testing::TestDatabase;
using testing::TestRole;
using testing::WaitFor;

// The first column of the first row of `sql`, as text ("" for NULL).
std::string Query(const std::string& dsn, const std::string& sql) {
  pqxx::connection conn(dsn);
  pqxx::nontransaction tx(conn);
  const pqxx::field f = tx.exec1(sql)[0];
  return f.is_null() ? "" : f.as<std::string>();
}

int64_t Count(const std::string& dsn, const std::string& sql) {
  return std::stoll(Query(dsn, sql));
}

// `sqlgroup consume` of `group` with `args` until `done` holds (or 90 s),
// then SIGTERM: its log, after a graceful exit (a failed expectation
// otherwise).
std::string ConsumeUntil(const std::string& dsn, const std::string& group,
                         const std::vector<std::string>& args,
                         const std::function<bool()>& done) {
  const std::string log =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("sqlgroup-cli-test-", getpid(), "-", group, ".log"))
          .string();
  std::filesystem::remove(log);
  std::vector<std::string> argv = {
      CliPath(), "consume",        "--dsn", dsn,         "--group",
      group,     "--metrics_addr", "",      "--workers", "2"};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess member(argv, log);
  EXPECT_TRUE(WaitFor(done, absl::Seconds(90), absl::Milliseconds(50)))
      << member.Log();
  member.Signal(SIGTERM);
  EXPECT_EQ(member.Wait(absl::Seconds(20)), 0) << member.Log();
  std::string out = member.Log();
  std::filesystem::remove(log);
  return out;
}

struct BadInput {
  std::vector<std::string> args;
  int exit_code;
  const char* message;
};

// Every bad input is refused with a clear message and a non-zero exit, in
// bounded time, without a password in its output, and leaves every
// database exactly as it was.
TEST(Cli, BadInputFailsWithAClearMessageAndChangesNothing) {
  TestRole role;  // declared first: dropped after the databases
  TestDatabase db;
  TestDatabase unmigrated;
  TestDatabase newer;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(
      RunCli({"group", "create", "g", "--parts", "4", "--dsn", dsn}).exit_code,
      0);
  ASSERT_EQ(RunCli({"produce", "--group", "g", "--count", "20", "--keys", "3",
                    "--dsn", dsn})
                .exit_code,
            0);
  ASSERT_EQ(RunCli({"migrate", "--dsn", newer.dsn()}).exit_code, 0);
  ExecSql(newer.dsn(),
          "INSERT INTO sqlgroup.schema_migrations (version, name) "
          "VALUES (999, '999_future.sql')");
  const std::string wrong_password = "wr0ng-pw-71c3";
  const std::string wrong_kv = absl::StrCat(
      "host=127.0.0.1 port=", SharedPostgres().port(), " dbname=", db.name(),
      " user=", role.name(), " password=", wrong_password);
  const std::string wrong_uri =
      absl::StrCat("postgresql://", role.name(), ":", wrong_password,
                   "@127.0.0.1:", SharedPostgres().port(), "/", db.name());
  // TEST-NET-1 (RFC 5737) is never routed: the connection attempt either
  // fails at once or times out after the default 5 s.
  const std::string unreachable =
      "host=192.0.2.1 dbname=app user=u password=hunter2";

  const BadInput cases[] = {
      // The command line itself.
      {{}, 2, "no command given"},
      {{"frobnicate"}, 2, "unknown command 'frobnicate'"},
      {{"group", "explode", "x"}, 2, "unknown command"},
      {{"migrate", "--no_such_flag"}, 2, "unknown flag --no_such_flag"},
      {{"consume", "--grup", "g"},
       2,
       "unknown flag --grup; did you mean --group?"},
      {{"migrate", "--parts", "3"}, 2, "--parts does not apply"},
      {{"group", "list", "--log_level", "loud"}, 2, "--log_level=loud"},
      {{"group", "create", "--dsn", dsn}, 2, "usage: sqlgroup group create"},
      // Malformed or out-of-range values.
      {{"group", "create", "h", "--ttl", "fivesec"},
       2,
       "--ttl=fivesec: expected a duration with its unit, such as 5s"},
      {{"group", "create", "h", "--heartbeat", "1 s"},
       2,
       "--heartbeat=1 s: expected a duration"},
      {{"group", "create", "h", "--parts", "lots"},
       2,
       "--parts=lots: expected a whole number"},
      {{"consume", "--group", "g", "--max_attempts", "5x"},
       2,
       "--max_attempts=5x: expected a whole number"},
      // Values that read but are wrong name the flag given.
      {{"consume", "--group", "g", "--workers", "100000", "--dsn", dsn},
       2,
       "--workers=100000: give 1 to 9999"},
      {{"consume", "--group", "g", "--idle_connection_timeout", "0s", "--dsn",
        dsn},
       2,
       "--idle_connection_timeout must be"},
      {{"group", "create", "h", "--ttl", "0s", "--dsn", dsn},
       2,
       "ttl must be positive, got 0"},
      {{"group", "create", "h", "--parts", "0", "--dsn", dsn},
       2,
       "parts must be between 1 and 4096"},
      {{"group", "create", "h", "--parts", "5000", "--dsn", dsn},
       2,
       "parts must be between 1 and 4096"},
      {{"group", "create", "h", "--ttl", "1s", "--heartbeat", "1s", "--dsn",
        dsn},
       2,
       "at most half the session ttl"},
      {{"group", "alter", "g", "--ttl", "1s", "--dsn", dsn},
       2,
       "at most half the session ttl"},
      {{"group", "alter", "g", "--dsn", dsn},
       2,
       "group alter needs --parts, --ttl, --heartbeat, --dead_retention, "
       "--on_dead and/or --topic"},
      {{"group", "alter", "g", "--topic", "", "--dsn", dsn},
       2,
       "--topic names no topic; give a topic's name, or `none`"},
      {{"group", "alter", "g", "--topic", "nope", "--dsn", dsn},
       1,
       "topic nope does not exist; create it with `sqlgroup topic create "
       "nope`; nothing was changed"},
      {{"topic", "create", "bad name", "--dsn", dsn},
       2,
       "topic name 'bad name' is invalid"},
      {{"topic", "delete", "nope", "--dsn", dsn},
       1,
       "topic nope does not exist"},
      {{"produce", "--topic", "t", "--group", "g", "--payload", "x", "--dsn",
        dsn},
       2,
       "give --group or --topic, not both"},
      {{"produce", "--topic", "nope", "--payload", "x", "--dsn", dsn},
       1,
       "topic nope does not exist"},
      {{"group", "alter", "g", "--parts", "0", "--dsn", dsn},
       2,
       "--parts must be between 1 and 4096, got 0; nothing was changed"},
      {{"group", "alter", "g", "--parts", "4097", "--dsn", dsn},
       2,
       "--parts must be between 1 and 4096, got 4097"},
      {{"group", "alter", "absent", "--parts", "8", "--dsn", dsn},
       1,
       "consumer group 'absent' does not exist"},
      {{"group", "create", "bad name!", "--dsn", dsn}, 2, "is invalid"},
      {{"group", "create", "g", "--dsn", dsn}, 1, "already exists"},
      {{"group", "create", "h", "--ordering", "fifo", "--dsn", dsn},
       2,
       "--ordering=fifo: 'fifo' is not an ordering: use key"},
      {{"group", "create", "h", "--ordering", "", "--dsn", dsn},
       2,
       "or none (items of a key may run concurrently)"},
      {{"consume", "--group", "g", "--fail_rate", "1.5", "--dsn", dsn},
       2,
       "--fail_rate=1.5 is not a probability: give a number from 0 to 1"},
      {{"consume", "--group", "g", "--fail_rate", "-0.1", "--dsn", dsn},
       2,
       "--fail_rate=-0.1 is not a probability"},
      {{"produce", "--group", "g", "--fail_rate", "0.1", "--dsn", dsn},
       2,
       "--fail_rate does not apply to `sqlgroup produce`"},
      {{"consume", "--dsn", dsn}, 2, "--group is required"},
      {{"consume", "--group", "g", "--static_timeout", "10s", "--dsn", dsn},
       2,
       "--static_timeout needs an instance name of letters, digits"},
      {{"consume", "--group", "g", "--instance", "m0", "--static_timeout",
        "10ms", "--metrics_addr", "", "--dsn", dsn},
       2,
       "--static_timeout (10ms) is below group g's heartbeat interval (1s)"},
      {{"group", "leave", "g", "--instance", "nobody", "--dsn", dsn},
       1,
       "group g has no static member with instance 'nobody'"},
      {{"group", "create", "h", "--assignor", "roundrobin", "--dsn", dsn},
       2,
       "--assignor=roundrobin: not an assignor; use lexical"},
      {{"consume", "--group", "g", "--members", "0", "--dsn", dsn},
       2,
       "--members must be 1..1000, got 0"},
      {{"consume", "--group", "g", "--handler", "explode", "--dsn", dsn},
       2,
       "--handler=explode: unknown handler"},
      {{"produce", "--group", "g", "--count", "-1", "--dsn", dsn},
       2,
       "must not be negative"},
      {{"produce", "--group", "g", "--payload_bytes", "1048577", "--dsn", dsn},
       2,
       "--payload_bytes=1048577 is over the limit of 1048576 bytes"},
      {{"demo", "--duration", "1s"}, 2, "--duration must be at least 10s"},
      {{"grant", "--dsn", dsn}, 2, "grant needs --member_role"},
      {{"grant", "--member_role", "no_such_role", "--dsn", dsn},
       1,
       "role 'no_such_role' does not exist"},
      // A group that does not exist.
      {{"group", "describe", "nope", "--dsn", dsn},
       1,
       "consumer group 'nope' does not exist"},
      {{"group", "delete", "nope", "--dsn", dsn}, 1, "does not exist"},
      {{"group", "alter", "nope", "--ttl", "9s", "--dsn", dsn},
       1,
       "does not exist"},
      {{"consume", "--group", "nope", "--metrics_addr", "", "--dsn", dsn},
       1,
       "consumer group 'nope' does not exist"},
      {{"produce", "--group", "nope", "--keys", "2", "--dsn", dsn},
       1,
       "consumer group 'nope' does not exist"},
      // No schema, or one newer than this binary.
      {{"migrate", "--dsn", dsn, "--migrations_dir", "/no/such/dir"},
       1,
       "migrations folder '/no/such/dir' does not exist"},
      {{"consume", "--group", "g", "--handler", "count", "--dsn",
        unmigrated.dsn()},
       1,
       "no sqlgroup schema: run `sqlgroup migrate`"},
      {{"group", "list", "--dsn", unmigrated.dsn()},
       1,
       "run `sqlgroup migrate`"},
      {{"migrate", "--dsn", newer.dsn()}, 1, "newer than this sqlgroup knows"},
      {{"group", "create", "h", "--dsn", newer.dsn()},
       1,
       "which accepts only members that know schema"},
      {{"consume", "--group", "g", "--handler", "count", "--dsn", newer.dsn()},
       1,
       "which accepts only members that know schema"},
      {{"produce", "--group", "g", "--keys", "2", "--dsn", newer.dsn()},
       1,
       "which accepts only members that know schema"},
      // Handlers that cannot run: refused before the member joins.
      {{"consume", "--group", "g", "--handler", "sql:SELEC 1", "--dsn", dsn},
       2,
       "the database refused the statement: syntax error"},
      {{"consume", "--group", "g", "--handler", "sql:SELECT 1 + $4", "--dsn",
        dsn},
       2,
       "the statement uses $4, but the handler passes only"},
      {{"consume", "--group", "g", "--handler", "sql:public.nope", "--dsn",
        dsn},
       2,
       "function public.nope(text, bytea, uuid) does not exist"},
      {{"consume", "--group", "g", "--handler", "exec:no-such-program-xyz",
        "--dsn", dsn},
       2,
       "no program named no-such-program-xyz in $PATH"},
      {{"consume", "--group", "g", "--handler", "ftp://host/x", "--dsn", dsn},
       2,
       "unknown handler; use sql:STATEMENT"},
      {{"consume", "--group", "g", "--handler", "http://", "--dsn", dsn},
       2,
       "--handler=http://: is not a URL"},
      {{"consume", "--group", "g", "--handler", "http://127.0.0.1:9/x",
        "--handler_timeout", "0s", "--dsn", dsn},
       2,
       "--handler_timeout must be more than 0"},
      // Wrong password, unreachable host.
      {{"group", "list", "--dsn", wrong_kv},
       1,
       "password authentication failed"},
      {{"migrate", "--dsn", wrong_uri}, 1, "check the user name and password"},
      {{"consume", "--group", "g", "--dsn", wrong_uri},
       1,
       "password authentication failed"},
      {{"produce", "--group", "g", "--payload", "p", "--dsn", wrong_kv},
       1,
       "password authentication failed"},
      {{"group", "list", "--dsn", unreachable},
       1,
       "cannot connect to 'host=192.0.2.1"},
  };
  const std::vector<const TestDatabase*> dbs = {&db, &unmigrated, &newer};
  std::vector<std::string> before;
  for (const TestDatabase* d : dbs)
    before.push_back(DatabaseSnapshot(d->dsn()));
  for (const BadInput& c : cases) {
    const auto r = RunCli(c.args, {}, absl::Seconds(20));
    std::string shown;
    for (const auto& a : c.args) shown += a + " ";
    EXPECT_EQ(r.exit_code, c.exit_code) << shown << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << shown;
    EXPECT_THAT(r.err, Not(HasSubstr("terminate called"))) << shown;
    EXPECT_LT(r.elapsed, absl::Seconds(10)) << shown;
    for (const std::string& secret : {wrong_password, std::string("hunter2")}) {
      EXPECT_THAT(r.out + r.err, Not(HasSubstr(secret))) << shown;
    }
    for (size_t i = 0; i < dbs.size(); ++i) {
      EXPECT_EQ(DatabaseSnapshot(dbs[i]->dsn()), before[i])
          << shown << "changed database " << dbs[i]->name();
    }
  }
}

// A bad value of every kind of flag (duration, whole number, enum, address,
// URL), given on the command line and then in its environment variable:
// exit code 2 and a sentence naming the flag, and the variable when the
// value came from there; never Abseil's own words.
TEST(Cli, ABadValueOfEveryKindNamesItsFlagAndVariable) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(RunCli({"group", "create", "g", "--dsn", dsn}).exit_code, 0);
  struct Case {
    std::string flag;
    std::string value;
    std::vector<std::string> command;
    std::string says;
  };
  const std::vector<std::string> consume = {"consume", "--group", "g", "--dsn",
                                            dsn};
  const std::vector<std::string> produce = {
      "produce", "--group", "g", "--payload", "p", "--dsn", dsn};
  const std::vector<std::string> create = {"group", "create", "h", "--dsn",
                                           dsn};
  const std::vector<Case> cases = {
      // Durations.
      {"ttl", "5", create, "expected a duration with its unit, such as 5s"},
      {"heartbeat", "1 s", create, "expected a duration"},
      {"handler_timeout", "0s", consume, "must be more than 0"},
      {"retry_for", "-1s", produce, "must not be negative"},
      {"delay", "-5s", produce, "must be 0 or more"},
      // Whole numbers.
      {"parts", "abc", create, "expected a whole number"},
      {"parts", "0", create, "between 1 and 4096"},
      {"workers", "100000", consume, "give 1 to 9999"},
      {"max_attempts", "5x", consume, "expected a whole number"},
      {"port", "70000", {"postgres"}, "1 to 65535"},
      // Enums.
      {"pool_mode", "sometimes", consume, "must be auto"},
      {"format",
       "csv",
       {"produce", "--group", "g", "--input", "-", "--dsn", dsn},
       "must be text"},
      {"ordering", "random", create, "ordering"},
      {"assignor", "fair", create, "assignor"},
      {"log_level", "loud", {"group", "list", "--dsn", dsn}, "is not one of"},
      // Addresses.
      {"metrics_addr", "256.1.1.1:99999", consume,
       "expected an IP address and a port"},
      {"metrics_addr", "localhost", consume, "expected an IP address"},
      // URLs.
      {"handler", "http://", consume, "http"},
      {"handler", "ftp://host/x", consume, "handler"},
  };
  for (const Case& c : cases) {
    const std::string flag = "--" + c.flag;
    const std::string variable = "SQLGROUP_" + absl::AsciiStrToUpper(c.flag);
    std::vector<std::string> argv = c.command;
    argv.push_back(flag);
    argv.push_back(c.value);
    const auto given = RunCli(argv, {}, absl::Seconds(20));
    const auto from_env =
        RunCli(c.command, {{variable, c.value}}, absl::Seconds(20));
    for (const auto* r : {&given, &from_env}) {
      const std::string shown = absl::StrCat(r == &given ? "" : variable + "=",
                                             flag, " ", c.value, ": ", r->err);
      // The sentence, without the usage line that follows it.
      const std::string said = r->err.substr(0, r->err.find("\nusage:"));
      EXPECT_EQ(r->exit_code, 2) << shown;
      EXPECT_THAT(said, HasSubstr(c.says)) << shown;
      EXPECT_THAT(said, HasSubstr(flag)) << shown;
      EXPECT_THAT(r->err, Not(HasSubstr("Illegal value"))) << shown;
      // Only the command's own usage line, not the global help.
      EXPECT_THAT(r->err, Not(HasSubstr("Commands:"))) << shown;
    }
    EXPECT_THAT(from_env.err, HasSubstr("$" + variable))
        << variable << "=" << c.value << ": " << from_env.err;
  }
}

TEST(Cli, AMetricsAddressThatCannotBeServedIsRefusedWithWhatToDo) {
  TestDatabase db;
  ASSERT_EQ(RunCli({"migrate", "--dsn", db.dsn()}).exit_code, 0);
  ASSERT_EQ(RunCli({"group", "create", "g", "--dsn", db.dsn()}).exit_code, 0);
  const auto r = RunCli({"consume", "--group", "g", "--metrics_addr",
                         "192.0.2.1:9464", "--dsn", db.dsn()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(
      r.err,
      HasSubstr("cannot listen on 192.0.2.1:9464 for metrics and health"));
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
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("from version 0 to ",
                                            SchemaVersionKnown())));
  const auto again = RunCli({"migrate"}, {{"SQLGROUP_DSN", db.dsn()}});
  EXPECT_THAT(again.out, HasSubstr(absl::StrCat("up to date at version ",
                                                SchemaVersionKnown())));
}

TEST(Cli, FlagsAsPeopleTypeThem) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  // Dashed and underscored spellings do the same.
  auto dashed = RunCli({"group", "create", "a", "--parts", "6", "--ordering",
                        "none", "--dsn", dsn, "--log-level", "warn"});
  auto underscored =
      RunCli({"group", "create", "b", "--parts", "6", "--ordering", "none",
              "--dsn", dsn, "--log_level", "warn"});
  ASSERT_EQ(dashed.exit_code, 0) << dashed.err;
  ASSERT_EQ(underscored.exit_code, 0) << underscored.err;
  EXPECT_EQ(dashed.out.substr(dashed.out.find(" with ")),
            underscored.out.substr(underscored.out.find(" with ")));
  // consume --metrics-addr: refused for the same reason as --metrics_addr
  // (the port is not a port), not as an unknown flag.
  for (const char* spelling : {"--metrics-addr", "--metrics_addr"}) {
    const auto r = RunCli(
        {"consume", "--group", "a", spelling, "nonsense:x", "--dsn", dsn});
    EXPECT_EQ(r.exit_code, 2) << spelling;
    EXPECT_THAT(r.err, HasSubstr("--metrics_addr=nonsense:x: expected an IP "
                                 "address and a port"))
        << spelling;
  }
  // A typo names the closest flag, and changes nothing.
  const auto typo =
      RunCli({"group", "create", "c", "--prts", "4", "--dsn", dsn});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.err,
              HasSubstr("unknown flag --prts; did you mean --parts?"));
  // Flags from the environment; a flag given overrides them.
  auto env = RunCli({"group", "create", "d", "--dsn", dsn},
                    {{"SQLGROUP_PARTS", "7"}, {"SQLGROUP_ORDERING", "none"}});
  ASSERT_EQ(env.exit_code, 0) << env.err;
  EXPECT_THAT(env.out,
              HasSubstr("created group d with 7 parts, ordering none"));
  env = RunCli({"group", "create", "e", "--parts", "5", "--dsn", dsn},
               {{"SQLGROUP_PARTS", "7"}});
  EXPECT_THAT(env.out, HasSubstr("created group e with 5 parts"));
  // A variable of a flag the command does not take is not its business.
  env = RunCli({"group", "list", "--dsn", dsn}, {{"SQLGROUP_PARTS", "7"}});
  EXPECT_EQ(env.exit_code, 0) << env.err;
  const auto list = RunCli({"group", "list", "--dsn", dsn});
  EXPECT_THAT(list.out, Not(HasSubstr(" c ")));
}

TEST(Cli, EachCommandHasItsOwnHelp) {
  for (const std::vector<std::string>& command :
       std::vector<std::vector<std::string>>{{"consume"},
                                             {"produce"},
                                             {"migrate"},
                                             {"grant"},
                                             {"group", "create"},
                                             {"group", "alter"},
                                             {"group", "describe"},
                                             {"group", "leave"},
                                             {"group", "list"},
                                             {"group", "delete"},
                                             {"demo"},
                                             {"postgres"}}) {
    std::vector<std::string> args = command;
    args.push_back("--help");
    const auto r = RunCli(args);
    std::string name = absl::StrJoin(command, " ");
    EXPECT_EQ(r.exit_code, 0) << name;
    EXPECT_THAT(r.out, HasSubstr("usage: sqlgroup " + name)) << name;
    EXPECT_THAT(r.out, HasSubstr("--dsn (default")) << name;
    EXPECT_THAT(r.out, Not(HasSubstr("No flags matched"))) << name;
  }
  const auto consume = RunCli({"consume", "-h"});
  EXPECT_THAT(consume.out, HasSubstr("--handler (default \"noop\"; "
                                     "$SQLGROUP_HANDLER)"));
  EXPECT_THAT(consume.out, HasSubstr("--workers (default 2;"));
  EXPECT_THAT(RunCli({"help", "group", "create"}).out,
              HasSubstr("--parts (default 16;"));
  EXPECT_THAT(RunCli({"--help"}).out, HasSubstr("Commands:"));
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
  EXPECT_THAT(r.out, HasSubstr("\"ordering\":\"key\""));
  r = RunCli({"group", "describe", "orders", "--dsn", dsn});
  EXPECT_THAT(r.out, HasSubstr("GROUP orders  parts=8  ordering=key"));
  r = RunCli({"group", "create", "audit", "--parts", "2", "--ordering", "none",
              "--dsn", dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("created group audit with 2 parts, ordering "
                               "none"));
  r = RunCli({"group", "describe", "audit", "--dsn", dsn});
  EXPECT_THAT(r.out, HasSubstr("GROUP audit  parts=2  ordering=none"));
  r = RunCli({"group", "describe", "audit", "--json", "--dsn", dsn});
  EXPECT_THAT(r.out, HasSubstr("\"ordering\":\"none\""));
  r = RunCli({"group", "list", "--dsn", dsn});
  EXPECT_THAT(r.out, HasSubstr("ORDERING"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("audit +2  none "));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("orders +8  key "));
  r = RunCli({"group", "list", "--json", "--dsn", dsn});
  EXPECT_THAT(r.out, HasSubstr("\"group\":\"audit\",\"parts\":2,"
                               "\"ordering\":\"none\""));
  r = RunCli({"group", "delete", "orders", "--dsn", dsn});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A group with items is deleted only with --force, which says what went.
TEST(Cli, DeletingAGroupWithItemsNeedsForce) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(RunCli({"group", "create", "full", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(RunCli({"group", "create", "empty", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(RunCli({"produce", "--group", "full", "--count", "7", "--dsn", dsn})
                .exit_code,
            0);
  auto r = RunCli({"group", "delete", "full", "--dsn", dsn});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("group full holds 7 waiting item(s) and 0 "
                               "dead letter(s), which would go with it: pass "
                               "--force"));
  EXPECT_THAT(RunCli({"group", "list", "--dsn", dsn}).out, HasSubstr("full"));
  r = RunCli({"group", "delete", "full", "--force", "--dsn", dsn});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("deleted group full with 7 waiting item(s) "
                               "and 0 dead letter(s)"));
  r = RunCli({"group", "delete", "empty", "--dsn", dsn});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(RunCli({"group", "list", "--dsn", dsn}).out,
              Not(HasSubstr("full")));
}

// `sqlgroup produce ARGS < file`: the CLI with `input` on its standard
// input.
testing::ProcessResult ProduceFromStdin(const std::vector<std::string>& args,
                                        const std::string& input) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("sqlgroup-cli-test-", getpid(), "-stdin"))
          .string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << input;
  }
  std::vector<std::string> argv = {
      "/bin/sh", "-c", "exec \"$0\" produce \"$@\" < \"$STDIN_FILE\"",
      CliPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = testing::RunProcess(argv, {{"STDIN_FILE", path}});
  std::filesystem::remove(path);
  return r;
}

// What the group holds of item `id`: "KEY|HEX(PAYLOAD)", KEY "<null>"
// for an unkeyed one.
std::string Stored(const std::string& dsn, const std::string& id) {
  return Query(dsn, absl::StrCat("SELECT coalesce(key, '<null>') || '|' || "
                                 "encode(payload, 'hex') FROM sqlgroup.items "
                                 "WHERE id = '",
                                 id, "'"));
}

std::string Hex(const std::string& bytes) {
  std::string out;
  for (const unsigned char c : bytes)
    absl::StrAppend(&out, absl::Hex(c, absl::kZeroPad2));
  return out;
}

// Your own items, from standard input, a line each: keys and payloads
// arrive byte for byte, in the order of the lines, each id printed on its
// line's place; JSON lines carry any bytes and a delay.
TEST(Cli, ProduceSendsYourOwnItemsByteForByte) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(RunCli({"group", "create", "g", "--dsn", dsn}).exit_code, 0);
  const std::string binary("\x01\xff\x00 \r\\n\"'", 9);
  struct Line {
    std::string text;
    std::string stored;  // what the group must hold
  };
  const std::vector<Line> text_lines = {
      {"user-7\thello, world", "user-7|" + Hex("hello, world")},
      {"user-7\t" + binary, "user-7|" + Hex(binary)},
      {"no key at all", "<null>|" + Hex("no key at all")},
      {"\tleading tab", "<null>|" + Hex("leading tab")},
      {"k\ta\tb", "k|" + Hex("a\tb")},
      {"caf\xc3\xa9\tna\xc3\xafve", "caf\xc3\xa9|" + Hex("na\xc3\xafve")},
  };
  std::string input;
  for (const Line& l : text_lines) input += l.text + "\n";
  input += "\n";                // an empty line: skipped
  input += "last\tno-newline";  // the last line may lack its '\n'
  auto r = ProduceFromStdin(
      {"--group", "g", "--input", "-", "--print_ids", "--dsn", dsn}, input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> ids = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(ids.size(), text_lines.size() + 1) << r.out;
  for (size_t i = 0; i < text_lines.size(); ++i) {
    EXPECT_EQ(Stored(dsn, ids[i]), text_lines[i].stored) << "line " << i + 1;
  }
  EXPECT_EQ(Stored(dsn, ids.back()), "last|" + Hex("no-newline"));

  // Another delimiter, given as the shell passes it.
  r = ProduceFromStdin({"--group", "g", "--input", "-", "--key_delimiter",
                        "::", "--print_ids", "--dsn", dsn},
                       "a::b::c\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Stored(dsn, std::string(absl::StripAsciiWhitespace(r.out))),
            "a|" + Hex("b::c"));

  // JSON lines.
  r = ProduceFromStdin(
      {"--group", "g", "--input", "-", "--format", "json", "--print_ids",
       "--dsn", dsn},
      "{\"key\": \"j\", \"payload\": \"caf\\u00e9 \\\"q\\\"\\n\"}\n"
      "{\"key\": null, \"payload_base64\": \"Af8AIA0=\", \"delay\": \"1h\"}\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ids = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(ids.size(), 2u) << r.out;
  EXPECT_EQ(Stored(dsn, ids[0]), "j|" + Hex("caf\xc3\xa9 \"q\"\n"));
  EXPECT_EQ(Stored(dsn, ids[1]),
            "<null>|" + Hex(std::string("\x01\xff\x00\x20\x0d", 5)));
  EXPECT_EQ(Query(dsn, absl::StrCat("SELECT not_before > now() + interval "
                                    "'59 minutes' FROM sqlgroup.items WHERE "
                                    "id = '",
                                    ids[1], "'")),
            "t");

  // One item: --key and --payload_file's bytes.
  const std::string file =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("sqlgroup-cli-test-", getpid(), "-payload"))
          .string();
  { std::ofstream(file, std::ios::binary) << binary; }
  r = RunCli({"produce", "--group", "g", "--key", "one", "--payload_file", file,
              "--print_ids", "--dsn", dsn});
  std::filesystem::remove(file);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Stored(dsn, std::string(absl::StripAsciiWhitespace(r.out))),
            "one|" + Hex(binary));
}

// A line that is not an item stops the input there: what came before it
// is sent, nothing after it, and the message names the line.
TEST(Cli, ProduceStopsAtABadLineAndSaysWhereToGoOn) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(RunCli({"group", "create", "g", "--dsn", dsn}).exit_code, 0);
  const auto r = ProduceFromStdin(
      {"--group", "g", "--input", "-", "--format", "json", "--dsn", dsn},
      "{\"payload\": \"1\"}\n{\"payload\": \"2\"}\n{\"paylod\": \"3\"}\n"
      "{\"payload\": \"4\"}\n");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("line 3 of standard input is not an item"));
  EXPECT_THAT(r.err, HasSubstr("\"paylod\""));
  EXPECT_THAT(r.err, HasSubstr("The 2 item(s) before it were sent"));
  EXPECT_EQ(Count(dsn, "SELECT count(*) FROM sqlgroup.items"), 2);
  // A key PostgreSQL could not store as given (it places the item) is
  // refused on its line, not cut.
  const auto bad_key =
      ProduceFromStdin({"--group", "g", "--input", "-", "--dsn", dsn},
                       std::string("fine\tx\nk\xff\ty\n", 12));
  EXPECT_EQ(bad_key.exit_code, 1) << bad_key.err;
  EXPECT_THAT(bad_key.err, HasSubstr("line 2 of standard input is not an "
                                     "item: its key is not UTF-8"));
  EXPECT_EQ(Count(dsn, "SELECT count(*) FROM sqlgroup.items"), 3);
}

// `group leave` of a static member whose process runs is refused, saying
// where it runs and what to do; once stopped, it leaves.
TEST(Cli, LeavingARunningStaticMemberSaysToStopItFirst) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(RunCli({"group", "create", "g", "--dsn", dsn}).exit_code, 0);
  const std::string log =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("sqlgroup-cli-test-", getpid(), "-static.log"))
          .string();
  ChildProcess member(
      {CliPath(), "consume", "--group", "g", "--instance", "pod-a",
       "--static_timeout", "60s", "--metrics_addr", "", "--dsn", dsn},
      log);
  ASSERT_TRUE(WaitFor(
      [&] {
        return Count(dsn,
                     "SELECT count(*) FROM sqlgroup.sessions WHERE "
                     "instance = 'pod-a'") == 1;
      },
      absl::Seconds(30)))
      << member.Log();
  auto r = RunCli({"group", "leave", "g", "--instance", "pod-a", "--dsn", dsn});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("instance 'pod-a' of group g is running (pid "));
  EXPECT_THAT(r.err, HasSubstr("Stop that process first"));
  EXPECT_EQ(Count(dsn, "SELECT count(*) FROM sqlgroup.sessions"), 1);
  member.Signal(SIGTERM);
  EXPECT_EQ(member.Wait(absl::Seconds(20)), 0) << member.Log();
  // Away now (its session waits for it), so it can leave for good.
  r = RunCli({"group", "leave", "g", "--instance", "pod-a", "--dsn", dsn});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Count(dsn, "SELECT count(*) FROM sqlgroup.sessions"), 0);
  std::filesystem::remove(log);
}

// Item n of a key carries n, counted over every produce run from the
// key's tally, in the key's enqueue (id) order, padded to --payload_bytes.
TEST(Cli, ProduceNumbersEachKeysItemsContinuingItsTally) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(
      RunCli({"group", "create", "g", "--parts", "4", "--dsn", dsn}).exit_code,
      0);
  for (const char* count : {"7", "3"}) {
    const auto r =
        RunCli({"produce", "--group", "g", "--count", count, "--keys", "2",
                "--payload_bytes", "6", "--dsn", dsn});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // k0 got items 0, 2, 4, 6 of the first run and 0, 2 of the second.
  const std::string per_key =
      "SELECT string_agg(convert_from(payload, 'UTF8'), '|' ORDER BY id) "
      "FROM sqlgroup.items WHERE key = ";
  EXPECT_EQ(Query(dsn, per_key + "'k0'"),
            "1 xxxx|2 xxxx|3 xxxx|4 xxxx|5 xxxx|6 xxxx");
  EXPECT_EQ(Query(dsn, per_key + "'k1'"), "1 xxxx|2 xxxx|3 xxxx|4 xxxx");
  EXPECT_EQ(Query(dsn,
                  "SELECT string_agg(key || '=' || n, ',' ORDER BY key) "
                  "FROM sqlgroup_demo.produced"),
            "k0=6,k1=4");
  // Unkeyed items keep plain payloads of the size asked for.
  ASSERT_EQ(RunCli({"produce", "--group", "g", "--count", "2",
                    "--payload_bytes", "3", "--dsn", dsn})
                .exit_code,
            0);
  EXPECT_EQ(Query(dsn,
                  "SELECT string_agg(DISTINCT convert_from(payload, "
                  "'UTF8'), ',') FROM sqlgroup.items WHERE key IS NULL"),
            "xxx");
}

// --fail_rate fails deliveries before the handler writes: at 1 with one
// attempt every item is dead-lettered and nothing recorded; at 0.25 with
// attempts to spare every item is recorded exactly once, with its payload,
// after retries.
TEST(Cli, FailRateFailsDeliveriesBeforeTheHandlerWrites) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  for (const char* group : {"doomed", "retried"}) {
    ASSERT_EQ(RunCli({"group", "create", group, "--parts", "2", "--dsn", dsn})
                  .exit_code,
              0);
    ASSERT_EQ(RunCli({"produce", "--group", group, "--count", "40", "--keys",
                      "4", "--dsn", dsn})
                  .exit_code,
              0);
  }
  const auto drained = [&](const std::string& group) {
    return [&dsn, group] {
      return Count(dsn,
                   "SELECT count(*) FROM sqlgroup.items WHERE "
                   "group_name = '" +
                       group + "'") == 0;
    };
  };
  ConsumeUntil(
      dsn, "doomed",
      {"--handler", "record", "--fail_rate", "1", "--max_attempts", "1"},
      drained("doomed"));
  EXPECT_EQ(Count(dsn,
                  "SELECT count(*) FROM sqlgroup.dead_items WHERE "
                  "last_error LIKE '%injected failure (--fail_rate=1)%'"),
            40);
  EXPECT_EQ(Count(dsn, "SELECT count(*) FROM sqlgroup_demo.results"), 0);

  const std::string log = ConsumeUntil(
      dsn, "retried",
      {"--handler", "record", "--fail_rate", "0.25", "--max_attempts", "100",
       "--backoff_initial", "50ms", "--backoff_max", "400ms"},
      drained("retried"));
  EXPECT_THAT(log, ::testing::ContainsRegex("failed=[1-9]"));
  EXPECT_EQ(Count(dsn,
                  "SELECT count(DISTINCT item_id) FROM "
                  "sqlgroup_demo.results"),
            40);
  EXPECT_EQ(Count(dsn, "SELECT count(*) FROM sqlgroup_demo.results"), 40);
  // Each key's numbers, from the stored payloads: 11..20, after the 10 of
  // its items produced into "doomed" (a key's tally spans groups).
  EXPECT_EQ(Query(dsn,
                  "SELECT string_agg(DISTINCT s, ',') FROM (SELECT "
                  "string_agg(substring(convert_from(payload, 'UTF8') "
                  "FROM '^[0-9]+'), ',' ORDER BY substring("
                  "convert_from(payload, 'UTF8') FROM '^[0-9]+')::int) "
                  "AS s FROM sqlgroup_demo.results GROUP BY key) k"),
            "11,12,13,14,15,16,17,18,19,20");
}

// The count handler proves per-key order from the numbers: 0 violations
// for items acknowledged in order, and a number the key saw already (a
// producer whose tally was set back) counted once.
TEST(Cli, CountCountsItemsOfAKeyOutOfTheirOrder) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(
      RunCli({"group", "create", "g", "--parts", "4", "--dsn", dsn}).exit_code,
      0);
  const auto produce = [&](const char* count) {
    const auto r = RunCli({"produce", "--group", "g", "--count", count,
                           "--keys", "3", "--dsn", dsn});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  const auto consume = [&] {
    ConsumeUntil(dsn, "g", {"--handler", "count"}, [&] {
      return Count(dsn, "SELECT count(*) FROM sqlgroup.items") == 0;
    });
  };
  produce("30");
  consume();
  EXPECT_EQ(Query(dsn,
                  "SELECT string_agg(key || ' n=' || n || ' last=' || "
                  "last_seq || ' bad=' || order_violations, ',' "
                  "ORDER BY key) FROM sqlgroup_demo.counters"),
            "k0 n=10 last=10 bad=0,k1 n=10 last=10 bad=0,"
            "k2 n=10 last=10 bad=0");
  ExecSql(dsn, "UPDATE sqlgroup_demo.produced SET n = 8 WHERE key = 'k0'");
  produce("3");  // k0's item is numbered 9 again
  consume();
  EXPECT_EQ(Query(dsn,
                  "SELECT string_agg(key || ' n=' || n || ' last=' || "
                  "last_seq || ' bad=' || order_violations, ',' "
                  "ORDER BY key) FROM sqlgroup_demo.counters"),
            "k0 n=11 last=9 bad=1,k1 n=11 last=11 bad=0,"
            "k2 n=11 last=11 bad=0");
}

// Tables made by an older sqlgroup gain the newer columns (a payload for
// `record`, the order check's for `count`) on first use, keeping their rows.
TEST(Cli, DemoTablesOfAnOlderVersionGainTheNewColumns) {
  TestDatabase db;
  const std::string dsn = db.dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(RunCli({"group", "create", "g", "--dsn", dsn}).exit_code, 0);
  ExecSql(dsn,
          "CREATE SCHEMA sqlgroup_demo;"
          "CREATE TABLE sqlgroup_demo.counters "
          "  (key text PRIMARY KEY, n bigint NOT NULL);"
          "CREATE TABLE sqlgroup_demo.produced "
          "  (key text PRIMARY KEY, n bigint NOT NULL);"
          "CREATE TABLE sqlgroup_demo.results "
          "  (item_id uuid NOT NULL, key text, session_id uuid NOT NULL, "
          "   part integer NOT NULL, epoch bigint NOT NULL, "
          "   acked_at timestamptz NOT NULL DEFAULT clock_timestamp());"
          "INSERT INTO sqlgroup_demo.counters VALUES ('old', 5)");
  const auto r = RunCli(
      {"produce", "--group", "g", "--count", "0", "--keys", "1", "--dsn", dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Query(dsn,
                  "SELECT string_agg(attrelid::regclass || '.' || "
                  "attname, ',' ORDER BY attrelid::regclass::text, "
                  "attname) FROM pg_attribute WHERE attnum > 0 AND "
                  "attname IN ('payload', 'last_seq', "
                  "'order_violations') AND attrelid IN ("
                  "'sqlgroup_demo.counters'::regclass, "
                  "'sqlgroup_demo.results'::regclass)"),
            "sqlgroup_demo.counters.last_seq,"
            "sqlgroup_demo.counters.order_violations,"
            "sqlgroup_demo.results.payload");
  EXPECT_EQ(Query(dsn,
                  "SELECT key || n || coalesce(last_seq::text, '-') || "
                  "order_violations FROM sqlgroup_demo.counters"),
            "old5-0");
}

}  // namespace
}  // namespace sqlgroup
