// A database crash under load: PostgreSQL restarted with `-m immediate`
// while members acknowledge items. Members reconnect with backoff, replace
// sessions that expired meanwhile, and every key's counter still ends
// exactly at what was produced. Runs on its own durable cluster: a crash
// must not lose commits that were acknowledged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <pqxx/pqxx>

#include "sqlgroup/private_postgres.h"
#include "support/subprocess.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using testing::ChildProcess;
using testing::CliPath;
using testing::RunCli;
using testing::WaitFor;

int64_t Count(const std::string& dsn, const std::string& sql) {
  try {
    pqxx::connection conn(dsn);
    pqxx::nontransaction tx(conn);
    return tx.exec1(sql)[0].as<int64_t>();
  } catch (const std::exception&) {
    return -1;  // the server is restarting
  }
}

TEST(DatabaseRestart, MembersReconnectAndEveryItemIsAcknowledgedOnce) {
  PrivatePostgresOptions options;
  options.durable = true;
  options.settings = {{"recovery_init_sync_method", "syncfs"}};
  auto pg = PrivatePostgres::Start(options);
  ASSERT_TRUE(pg.ok()) << pg.status();
  const std::string dsn = (*pg)->Dsn();
  ASSERT_EQ(RunCli({"migrate", "--dsn", dsn}).exit_code, 0);
  ASSERT_EQ(RunCli({"group", "create", "g", "--parts", "8", "--ttl", "2s",
                    "--heartbeat", "400ms", "--dsn", dsn})
                .exit_code,
            0);
  ASSERT_EQ(RunCli({"produce", "--dsn", dsn, "--group", "g", "--count", "3000",
                    "--keys", "50"})
                .exit_code,
            0);
  const std::filesystem::path logs =
      std::filesystem::temp_directory_path() / "sqlgroup-restart-test";
  std::filesystem::create_directories(logs);
  std::vector<std::unique_ptr<ChildProcess>> members;
  for (const char* name : {"m1", "m2"}) {
    members.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{CliPath(), "consume", "--dsn", dsn, "--group",
                                 "g", "--handler", "count:2ms", "--workers",
                                 "2", "--instance", name, "--metrics_addr", ""},
        (logs / (std::string(name) + ".log")).string()));
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        return Count(dsn,
                     "SELECT coalesce(sum(n), 0) FROM "
                     "sqlgroup_demo.counters") > 300;
      },
      absl::Seconds(30)));
  ASSERT_TRUE((*pg)->Restart(/*immediate=*/true).ok());
  ASSERT_TRUE(WaitFor(
      [&] { return Count(dsn, "SELECT count(*) FROM sqlgroup.items") == 0; },
      absl::Seconds(120)));
  EXPECT_EQ(Count(dsn,
                  "SELECT count(*) FROM sqlgroup_demo.produced p LEFT JOIN "
                  "sqlgroup_demo.counters c USING (key) "
                  "WHERE c.n IS DISTINCT FROM p.n"),
            0);
  EXPECT_EQ(Count(dsn, "SELECT sum(n) FROM sqlgroup_demo.counters"), 3000);
  // Still running after the crash: a graceful stop exits 0.
  for (auto& m : members) {
    m->Signal(SIGTERM);
    EXPECT_EQ(m->Wait(absl::Seconds(20)), 0) << m->Log();
    EXPECT_THAT(m->Log(), ::testing::HasSubstr("control connection restored"));
  }
  std::filesystem::remove_all(logs);
}

}  // namespace
}  // namespace sqlgroup
