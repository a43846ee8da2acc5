// Least privilege: an admin role that owns the sqlgroup schema migrates,
// administers groups and grants; a member role with only the grants of
// sql/grants/member.sql runs consumers end to end and can change nothing
// else.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <pqxx/pqxx>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/producer.h"
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
using testing::TestDatabase;
using testing::TestRole;
using testing::WaitFor;

class RolesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // What a DBA does once: the admin role may create the sqlgroup schema.
    ExecSql(db_.dsn(), absl::StrCat("GRANT CREATE ON DATABASE ", db_.name(),
                                    " TO ", admin_.name()));
    auto admin = Admin::Connect({.dsn = AdminDsn()});
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_api_ = std::move(*admin);
    ASSERT_TRUE(admin_api_->Migrate().ok());
    ASSERT_TRUE(
        admin_api_
            ->CreateGroup({.name = "g",
                           .parts = 2,
                           .session_ttl = absl::Seconds(2),
                           .heartbeat_interval = absl::Milliseconds(400)})
            .ok());
    const absl::Status granted = admin_api_->GrantRoles(
        {.member_role = member_.name(), .producer_role = producer_.name()});
    ASSERT_TRUE(granted.ok()) << granted;
    // The handler's own table belongs to the application, which grants it.
    ExecSql(AdminDsn(),
            absl::StrCat("CREATE SCHEMA app; CREATE TABLE app.results (id "
                         "uuid); GRANT USAGE ON SCHEMA app TO ",
                         member_.name(),
                         "; GRANT INSERT, SELECT ON app.results TO ",
                         member_.name()));
  }

  std::string AdminDsn() const { return admin_.Dsn(db_.name()); }
  std::string MemberDsn() const { return member_.Dsn(db_.name()); }

  int64_t Count(const std::string& sql) {
    pqxx::connection conn(db_.dsn());
    pqxx::nontransaction tx(conn);
    return tx.exec1(sql)[0].as<int64_t>();
  }

  // "table privilege" and "table.column privilege" lines of `role`.
  std::vector<std::string> Privileges(const std::string& role) {
    pqxx::connection conn(db_.dsn());
    pqxx::nontransaction tx(conn);
    std::vector<std::string> out;
    for (const auto& row : tx.exec_params(
             "SELECT c.relname || ' ' || a.privilege_type "
             "FROM pg_class c, aclexplode(c.relacl) a "
             "WHERE c.relnamespace = 'sqlgroup'::regnamespace "
             "AND a.grantee = $1::regrole "
             "UNION ALL SELECT c.relname || '.' || t.attname || ' ' || "
             "  a.privilege_type "
             "FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid, "
             "  aclexplode(t.attacl) a "
             "WHERE c.relnamespace = 'sqlgroup'::regnamespace "
             "AND a.grantee = $1::regrole ORDER BY 1",
             role)) {
      out.push_back(row[0].as<std::string>());
    }
    return out;
  }

  TestRole admin_, member_, producer_;  // dropped after the database
  TestDatabase db_;
  std::unique_ptr<Admin> admin_api_;
};

TEST_F(RolesTest, TheMemberRoleHasExactlyTheGrantedPrivileges) {
  const std::vector<std::string> want = {
      "dead_items INSERT",
      "dead_items SELECT",
      "dead_items.attempts UPDATE",
      "dead_items.died_at UPDATE",
      "dead_items.enqueued_at UPDATE",
      "dead_items.key UPDATE",
      "dead_items.last_error UPDATE",
      "dead_items.payload UPDATE",
      "groups SELECT",
      "items DELETE",
      "items SELECT",
      "items.attempts UPDATE",
      "items.last_error UPDATE",
      "items.not_before UPDATE",
      "ownership_log DELETE",
      "ownership_log INSERT",
      "ownership_log SELECT",
      "ownership_log.released_at UPDATE",
      "ownership_log.released_by UPDATE",
      "part_epochs USAGE",
      "pauses SELECT",
      "schema_migrations SELECT",
      "session_parts DELETE",
      "session_parts INSERT",
      "session_parts SELECT",
      "session_parts.acquired_at UPDATE",
      "session_parts.revoking_since UPDATE",
      "sessions DELETE",
      "sessions INSERT",
      "sessions SELECT",
      "sessions.away_until UPDATE",
      "sessions.circuit_error UPDATE",
      "sessions.circuit_open_since UPDATE",
      "sessions.connection_budget UPDATE",
      "sessions.connections UPDATE",
      "sessions.heartbeated_at UPDATE",
      "sessions.member_schema UPDATE",
      "sessions.member_version UPDATE",
  };
  EXPECT_EQ(Privileges(member_.name()), want);
  EXPECT_EQ(Privileges(producer_.name()),
            (std::vector<std::string>{
                "enqueue_keys SELECT", "groups SELECT", "items INSERT",
                "schema_migrations SELECT", "topics SELECT"}));
}

TEST_F(RolesTest, GrantingAgainIsIdempotentAndTakesExtraPrivilegesAway) {
  const auto granted = Privileges(member_.name());
  ExecSql(AdminDsn(), absl::StrCat("GRANT TRUNCATE, UPDATE ON sqlgroup.groups, "
                                   "sqlgroup.items TO ",
                                   member_.name()));
  ASSERT_NE(Privileges(member_.name()), granted);
  const auto r =
      RunCli({"grant", "--member_role", member_.name(), "--dsn", AdminDsn()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("granted member privileges to " + member_.name()));
  EXPECT_EQ(Privileges(member_.name()), granted);
  // The schema's owner migrates again without CREATE on the database.
  ExecSql(db_.dsn(), absl::StrCat("REVOKE CREATE ON DATABASE ", db_.name(),
                                  " FROM ", admin_.name()));
  const auto m = RunCli({"migrate", "--dsn", AdminDsn()});
  EXPECT_EQ(m.exit_code, 0) << m.err;
  EXPECT_THAT(m.out, HasSubstr("up to date"));
}

TEST_F(RolesTest, AConsumerUnderTheMemberRoleJoinsClaimsAcksDeadLettersLeaves) {
  // An expired session of a vanished member, for this one to reap.
  ExecSql(db_.dsn(),
          "INSERT INTO sqlgroup.sessions (group_name, heartbeated_at, "
          "member_schema) VALUES ('g', clock_timestamp() - interval '1 hour', "
          "(SELECT max(version) FROM sqlgroup.schema_migrations))");
  {
    auto p = Producer::Create({.dsn = producer_.Dsn(db_.name()), .group = "g"});
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<NewItem> items(20);
    items[7].payload = "poison";
    ASSERT_TRUE((*p)->Enqueue(items).ok());
  }
  std::ostringstream log;
  auto logger = std::make_shared<spdlog::logger>(
      "member", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
  logger->set_level(spdlog::level::debug);
  ConsumerOptions o;
  o.dsn = MemberDsn();
  o.group = "g";
  o.workers = 2;
  o.max_attempts = 2;
  o.backoff_initial = absl::Milliseconds(50);
  o.lag_interval = absl::Milliseconds(100);
  o.rebalance_poll = absl::Milliseconds(200);
  o.logger = logger;
  o.handler = [](const Item& item, AckTransaction& ack) {
    if (item.payload == "poison") return absl::InternalError("poison");
    ack.work().exec_params("INSERT INTO app.results VALUES ($1::uuid)",
                           item.id);
    return absl::OkStatus();
  };
  auto consumer = Consumer::Create(std::move(o));
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  ASSERT_TRUE((*consumer)->Start().ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        return (*consumer)->stats().acked == 19 &&
               (*consumer)->stats().dead_lettered == 1;
      },
      absl::Seconds(20)));
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.sessions WHERE "
                  "heartbeated_at < clock_timestamp() - interval '1 minute'"),
            0)
      << "the expired session was not reaped";
  absl::SleepFor(absl::Milliseconds(300));  // a lag measurement or two
  EXPECT_TRUE((*consumer)->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM app.results"), 19);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.sessions"), 0);
  EXPECT_THAT(log.str(), Not(HasSubstr("permission denied")));
}

TEST_F(RolesTest, TheMemberRoleCanChangeNothingButItsOwnWork) {
  const std::string before = DatabaseSnapshot(db_.dsn());
  const char* const statements[] = {
      "DROP TABLE sqlgroup.items",
      "TRUNCATE sqlgroup.items",
      "ALTER TABLE sqlgroup.groups ADD COLUMN x int",
      "CREATE TABLE sqlgroup.x (a int)",
      "CREATE INDEX ON sqlgroup.items (key)",
      "INSERT INTO sqlgroup.groups (name, parts) VALUES ('h', 1)",
      "UPDATE sqlgroup.groups SET parts = 1",
      "DELETE FROM sqlgroup.groups",
      "INSERT INTO sqlgroup.schema_migrations VALUES (99, 'x')",
      "DELETE FROM sqlgroup.schema_migrations",
      "INSERT INTO sqlgroup.items (group_name) VALUES ('g')",
      "UPDATE sqlgroup.items SET payload = 'x'",
      "UPDATE sqlgroup.sessions SET group_name = 'h'",
      "UPDATE sqlgroup.session_parts SET epoch = 1",
      "DELETE FROM sqlgroup.dead_items",
      "SELECT setval('sqlgroup.part_epochs', 1)",
      "DROP SCHEMA sqlgroup CASCADE",
  };
  for (const char* sql : statements) {
    try {
      pqxx::connection conn(MemberDsn());
      pqxx::work tx(conn);
      tx.exec(sql);
      tx.commit();
      ADD_FAILURE() << "the member role may run: " << sql;
    } catch (const pqxx::sql_error& e) {
      // libpqxx 6.4 leaves sqlstate() empty here; the message is the
      // server's.
      EXPECT_THAT(e.what(), ::testing::AnyOf(HasSubstr("permission denied"),
                                             HasSubstr("must be owner")))
          << sql;
    }
  }
  // A pending migration, which only the schema's owner may apply.
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/migrations-", db_.name());
  std::filesystem::create_directories(dir);
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator(
           absl::StrCat(std::getenv("SQLGROUP_SOURCE_DIR"), "/sql"))) {
    // The numbered migrations only (not schema.sql, their dump).
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.size() > 4 && std::isdigit(name[0]) &&
        name[3] == '_') {
      std::filesystem::copy_file(e.path(),
                                 dir + "/" + e.path().filename().string());
      ++count;
    }
  }
  std::ofstream(absl::StrFormat("%s/%03d_extra.sql", dir, count + 1))
      << "-- members-from: " << count
      << "\nCREATE TABLE sqlgroup.extra (a int);";
  const std::vector<std::vector<std::string>> commands = {
      {"migrate", "--migrations_dir", dir},       {"group", "create", "h"},
      {"group", "alter", "g", "--ttl", "9s"},     {"group", "delete", "g"},
      {"grant", "--member_role", member_.name()},
  };
  for (std::vector<std::string> args : commands) {
    args.insert(args.end(), {"--dsn", MemberDsn()});
    const auto r = RunCli(args);
    EXPECT_EQ(r.exit_code, 1) << args[1] << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr("permission denied")) << args[0];
    EXPECT_THAT(r.err, Not(HasSubstr(member_.password())));
  }
  EXPECT_EQ(DatabaseSnapshot(db_.dsn()), before);
}

TEST_F(RolesTest, TheCliConsumesUnderTheMemberRole) {
  const std::string log_path =
      absl::StrCat(::testing::TempDir(), "/roles-", db_.name(), ".log");
  ChildProcess member(
      {CliPath(), "consume", "--group", "g", "--handler", "fail:0.3",
       "--max_attempts", "2", "--backoff_initial", "50ms", "--metrics_addr", "",
       "--log_level", "debug", "--dsn", MemberDsn()},
      log_path);
  const auto produced = RunCli({"produce", "--group", "g", "--count", "200",
                                "--dsn", producer_.Uri(db_.name())});
  ASSERT_EQ(produced.exit_code, 0) << produced.err;
  EXPECT_TRUE(
      WaitFor([&] { return Count("SELECT count(*) FROM sqlgroup.items") == 0; },
              absl::Seconds(30)));
  member.Signal(SIGTERM);
  EXPECT_EQ(member.Wait(absl::Seconds(15)), 0) << member.Log();
  EXPECT_GT(Count("SELECT count(*) FROM sqlgroup.dead_items"), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.sessions"), 0);
  EXPECT_THAT(member.Log(), HasSubstr("acked="));
  EXPECT_THAT(member.Log(), Not(HasSubstr("permission denied")));
  EXPECT_THAT(member.Log(), Not(HasSubstr(member_.password())));
}

// A permanent error is no condition to wait out (issue 37): `consume`
// under a role that lacks the member grants, whether it may read nothing
// of the schema or only what a producer may, stops at once with a
// sentence that names the command that fixes it, and changes nothing.
TEST_F(RolesTest, ConsumeWithoutTheMemberGrantsStopsAndSaysWhatToRun) {
  TestRole bare;
  ExecSql(db_.dsn(), absl::StrCat("GRANT CONNECT ON DATABASE ", db_.name(),
                                  " TO ", bare.name()));
  for (const TestRole* role : {&bare, &producer_}) {
    const auto r = RunCli({"consume", "--group", "g", "--metrics_addr", "",
                           "--dsn", role->Dsn(db_.name())},
                          {}, absl::Seconds(30));
    EXPECT_FALSE(r.timed_out) << role->name() << ": " << r.err;
    EXPECT_LT(r.elapsed, absl::Seconds(10)) << role->name();
    EXPECT_NE(r.exit_code, 0) << role->name();
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat("sqlgroup grant --member_role ",
                                              role->name())))
        << role->name();
    EXPECT_THAT(r.err, Not(HasSubstr(role->password())));
  }
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.sessions"), 0);
}

// The same for a producer: `produce` under a role without the producer
// grants names the role and the grant that allows it, at once.
TEST_F(RolesTest, ProduceWithoutTheProducerGrantsSaysWhichGrantAllowsIt) {
  TestRole bare;
  ExecSql(db_.dsn(), absl::StrCat("GRANT CONNECT ON DATABASE ", db_.name(),
                                  " TO ", bare.name()));
  const auto r = RunCli({"produce", "--group", "g", "--key", "k", "--payload",
                         "x", "--dsn", bare.Dsn(db_.name())},
                        {}, absl::Seconds(30));
  EXPECT_LT(r.elapsed, absl::Seconds(10));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("This producer connects as role \"",
                                            bare.name(), "\"")))
      << r.err;
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("sqlgroup grant --producer_role ",
                                            bare.name())))
      << r.err;
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 0);
}

}  // namespace
}  // namespace sqlgroup
