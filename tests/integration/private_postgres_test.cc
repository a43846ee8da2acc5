#include "sqlgroup/private_postgres.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libpq-fe.h"
#include "pqxx/pqxx"
#include "support/pg_fixture.h"

namespace sqlgroup {
namespace {

namespace fs = std::filesystem;

using ::sqlgroup::testing::SharedPostgres;
using ::sqlgroup::testing::TestDatabase;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A directory of our own under /tmp, so stale-directory cleanup by one test
// cannot race with clusters of another.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string tmpl = "/tmp/sqlgroup-test-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    // Traversable by the server's OS user when we run as root.
    chmod(tmpl.c_str(), 0755);
    path_ = tmpl;
  }
  ~ScopedTempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// kill(pid, 0) also succeeds for a zombie, and an orphaned postmaster stays
// one until init reaps it, so a zombie counts as gone.
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         stat[paren + 2] == 'Z';
}

bool WaitUntilGone(pid_t pid, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (!ProcessGone(pid)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

void Exec(const std::string& dsn, const std::string& sql) {
  pqxx::connection conn(dsn);
  pqxx::nontransaction tx(conn);
  tx.exec0(sql);
}

std::string QueryValue(const std::string& dsn, const std::string& sql) {
  pqxx::connection conn(dsn);
  pqxx::nontransaction tx(conn);
  return tx.exec1(sql)[0].as<std::string>();
}

// Test clusters trade durability for speed unless a test needs it.
PrivatePostgresOptions TestOptions(const fs::path& base_dir = {}) {
  PrivatePostgresOptions options;
  options.base_dir = base_dir.string();
  options.durable = false;
  return options;
}

std::unique_ptr<PrivatePostgres> StartOrDie(PrivatePostgresOptions options) {
  absl::StatusOr<std::unique_ptr<PrivatePostgres>> pg =
      PrivatePostgres::Start(std::move(options));
  EXPECT_TRUE(pg.ok()) << pg.status();
  return pg.ok() ? *std::move(pg) : nullptr;
}

std::vector<fs::path> ClusterDirs(const fs::path& base) {
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(base)) {
    if (entry.path().filename().string().starts_with("sqlgroup-pg-")) {
      dirs.push_back(entry.path());
    }
  }
  return dirs;
}

pid_t DeadPid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

TEST(PrivatePostgres, StartsAndAcceptsConnectionsOnLoopback) {
  PrivatePostgres& pg = SharedPostgres();
  EXPECT_EQ(pg.Dsn("db1"), absl::StrCat("host=127.0.0.1 port=", pg.port(),
                                        " user=postgres dbname=db1"));
  EXPECT_THAT(QueryValue(pg.Dsn(), "SELECT version()"),
              HasSubstr("PostgreSQL 15"));
  EXPECT_EQ(QueryValue(pg.Dsn(), "SHOW port"), absl::StrCat(pg.port()));
  EXPECT_EQ(QueryValue(pg.Dsn(), "SHOW listen_addresses"), "127.0.0.1");
  EXPECT_EQ(QueryValue(pg.Dsn(), "SHOW fsync"), "off");  // durable = false
  EXPECT_EQ(QueryValue(pg.Dsn(), "SHOW max_connections"), "300");
  EXPECT_GT(pg.postmaster_pid(), 0);
}

TEST(PrivatePostgres, AcceptsConnectionsOnTheUnixSocketInItsDirectory) {
  PrivatePostgres& pg = SharedPostgres();
  EXPECT_EQ(fs::path(pg.socket_dir()).parent_path(),
            fs::path(pg.data_dir()).parent_path());
  std::string dsn = absl::StrCat("host=", pg.socket_dir(), " port=", pg.port(),
                                 " user=postgres dbname=postgres");
  EXPECT_EQ(QueryValue(dsn, "SELECT 1"), "1");
  EXPECT_EQ(QueryValue(dsn, "SELECT coalesce(inet_client_addr()::text, '')"),
            "");  // unix socket, not TCP
}

TEST(PrivatePostgres, AcceptsClientsOfOtherOsUsersOnTheUnixSocket) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  PrivatePostgres& pg = SharedPostgres();
  std::string dsn = absl::StrCat("host=", pg.socket_dir(), " port=", pg.port(),
                                 " user=postgres dbname=postgres");
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    constexpr uid_t kNobody = 65534;
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(2);
    _exit(PQping(dsn.c_str()) == PQPING_OK ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: ping failed, 2: setuid failed";
}

TEST(PrivatePostgres, RunsTwoClustersAtOnceOnDifferentPortsAndDirectories) {
  std::unique_ptr<PrivatePostgres> a = StartOrDie(TestOptions());
  std::unique_ptr<PrivatePostgres> b = StartOrDie(TestOptions());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->port(), b->port());
  EXPECT_NE(a->data_dir(), b->data_dir());
  EXPECT_NE(a->socket_dir(), b->socket_dir());
  EXPECT_EQ(QueryValue(a->Dsn(), "SHOW port"), absl::StrCat(a->port()));
  EXPECT_EQ(QueryValue(b->Dsn(), "SHOW port"), absl::StrCat(b->port()));
}

TEST(PrivatePostgres, StopEndsThePostmasterAndRemovesTheDirectoryOnce) {
  std::unique_ptr<PrivatePostgres> pg = StartOrDie(TestOptions());
  ASSERT_NE(pg, nullptr);
  fs::path root = fs::path(pg->data_dir()).parent_path();
  pid_t pid = pg->postmaster_pid();
  ASSERT_TRUE(fs::exists(root / "owner.pid"));

  ASSERT_TRUE(pg->Stop().ok());
  EXPECT_FALSE(fs::exists(root));
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  EXPECT_TRUE(pg->Stop().ok());
  EXPECT_EQ(pg->CreateDatabase("after_stop").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(pg->Restart(false).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(PrivatePostgres, ImmediateRestartKeepsCommittedDataAndBreaksConnections) {
  PrivatePostgresOptions options = TestOptions();
  options.durable = true;  // the data must survive the crash
  // Crash recovery fsyncs every file of the cluster first; syncfs is one
  // call and as safe, which saves seconds.
  options.settings = {{"recovery_init_sync_method", "syncfs"}};
  std::unique_ptr<PrivatePostgres> pg = StartOrDie(options);
  ASSERT_NE(pg, nullptr);
  {
    pqxx::connection conn(pg->Dsn());
    pqxx::work tx(conn);
    tx.exec0("CREATE TABLE kept (x int)");
    tx.exec0("INSERT INTO kept VALUES (42)");
    tx.commit();
  }
  pqxx::connection before(pg->Dsn());
  pqxx::work open_tx(before);
  open_tx.exec1("SELECT 1");
  int port = pg->port();
  pid_t old_pid = pg->postmaster_pid();

  ASSERT_TRUE(pg->Restart(/*immediate=*/true).ok());
  EXPECT_EQ(pg->port(), port);
  EXPECT_NE(pg->postmaster_pid(), old_pid);
  EXPECT_TRUE(ProcessGone(old_pid));
  EXPECT_EQ(QueryValue(pg->Dsn(), "SELECT x FROM kept"), "42");
  EXPECT_THROW(open_tx.exec1("SELECT 1"), pqxx::broken_connection);
}

TEST(PrivatePostgres, FastRestartKeepsPortAndSettings) {
  PrivatePostgresOptions options = TestOptions();
  options.settings = {{"work_mem", "12MB"}};
  std::unique_ptr<PrivatePostgres> pg = StartOrDie(options);
  ASSERT_NE(pg, nullptr);
  EXPECT_EQ(QueryValue(pg->Dsn(), "SHOW work_mem"), "12MB");
  int port = pg->port();

  ASSERT_TRUE(pg->Restart(/*immediate=*/false).ok());
  EXPECT_EQ(pg->port(), port);
  EXPECT_EQ(QueryValue(pg->Dsn(), "SHOW work_mem"), "12MB");
  EXPECT_EQ(QueryValue(pg->Dsn(), "SHOW fsync"), "off");
}

TEST(PrivatePostgres, PostmasterExitsWhenItsOwnerIsKilled) {
  ScopedTempDir base;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  // The test binary is single-threaded here, so the child may allocate.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    auto pg = PrivatePostgres::Start(TestOptions(base.path()));
    pid_t postmaster = pg.ok() ? (*pg)->postmaster_pid() : -1;
    if (write(fds[1], &postmaster, sizeof(postmaster)) < 0) _exit(1);
    for (;;) pause();  // until killed; never runs destructors
  }
  close(fds[1]);
  pid_t postmaster = -1;
  ssize_t n = read(fds[0], &postmaster, sizeof(postmaster));
  close(fds[0]);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_EQ(n, static_cast<ssize_t>(sizeof(postmaster)));
  ASSERT_GT(postmaster, 0) << "the child could not start a cluster";
  std::vector<fs::path> orphaned = ClusterDirs(base.path());
  ASSERT_EQ(orphaned.size(), 1u);

  EXPECT_TRUE(WaitUntilGone(postmaster, absl::Seconds(10)))
      << "postmaster " << postmaster << " outlived its owner";

  // The next Start() in the same base directory cleans up after the child.
  std::unique_ptr<PrivatePostgres> pg = StartOrDie(TestOptions(base.path()));
  ASSERT_NE(pg, nullptr);
  EXPECT_FALSE(fs::exists(orphaned[0]));
  EXPECT_EQ(ClusterDirs(base.path()).size(), 1u);
}

// Documents the caveat in the header: the kernel ties the parent-death
// signal to the thread that forked the server, not to the process.
TEST(PrivatePostgres, PostmasterExitsWhenTheThreadThatStartedItExits) {
  std::unique_ptr<PrivatePostgres> pg;
  std::thread([&pg] { pg = StartOrDie(TestOptions()); }).join();
  ASSERT_NE(pg, nullptr);
  EXPECT_TRUE(WaitUntilGone(pg->postmaster_pid(), absl::Seconds(10)));
  EXPECT_TRUE(pg->Stop().ok());
}

TEST(PrivatePostgres, StartRemovesOnlyDirectoriesOfDeadOwners) {
  ScopedTempDir base;
  auto make_dir = [&](const std::string& name, std::optional<pid_t> owner,
                      std::optional<pid_t> postmaster) {
    fs::path dir = base.path() / name;
    fs::create_directories(dir / "data");
    if (owner) std::ofstream(dir / "owner.pid") << *owner << "\n";
    if (postmaster) {
      std::ofstream(dir / "data" / "postmaster.pid") << *postmaster << "\n";
    }
    return dir;
  };
  // A stand-in for a postmaster left behind: its cwd is the data directory.
  fs::path stale_running = make_dir("sqlgroup-pg-stale1", DeadPid(), {});
  pid_t sleeper = fork();
  ASSERT_GE(sleeper, 0);
  if (sleeper == 0) {
    if (chdir((stale_running / "data").c_str()) != 0) _exit(1);
    execl("/bin/sleep", "sleep", "300", nullptr);
    _exit(1);
  }
  std::ofstream(stale_running / "data" / "postmaster.pid") << sleeper << "\n";
  fs::path stale_stopped = make_dir("sqlgroup-pg-stale2", DeadPid(), {});
  fs::path no_owner_file = make_dir("sqlgroup-pg-noowner", {}, {});
  fs::path live_owner = make_dir("sqlgroup-pg-live", getpid(), {});
  fs::path other_prefix = make_dir("other-dir", DeadPid(), {});
  // postmaster.pid names a live process that is not a postmaster of it.
  fs::path reused_pid = make_dir("sqlgroup-pg-reused", DeadPid(), getpid());
  // Wait for the sleeper to be in place before the cleanup looks for it.
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (fs::read_symlink(absl::StrCat("/proc/", sleeper, "/cwd")) !=
         fs::canonical(stale_running / "data")) {
    ASSERT_LT(absl::Now(), deadline);
    absl::SleepFor(absl::Milliseconds(10));
  }

  std::unique_ptr<PrivatePostgres> pg = StartOrDie(TestOptions(base.path()));
  ASSERT_NE(pg, nullptr);
  EXPECT_FALSE(fs::exists(stale_running));
  EXPECT_FALSE(fs::exists(stale_stopped));
  EXPECT_TRUE(fs::exists(no_owner_file));
  EXPECT_TRUE(fs::exists(live_owner));
  EXPECT_TRUE(fs::exists(other_prefix));
  EXPECT_TRUE(fs::exists(reused_pid));
  int status = 0;
  ASSERT_EQ(waitpid(sleeper, &status, WNOHANG), sleeper)
      << "the stale 'postmaster' was not stopped";
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGQUIT);
}

TEST(PrivatePostgres, MissingBinariesAreAFailedPreconditionNamingTheDir) {
  PrivatePostgresOptions options = TestOptions();
  options.bin_dir = "/nonexistent/sqlgroup-pg-bin";
  absl::StatusOr<std::unique_ptr<PrivatePostgres>> pg =
      PrivatePostgres::Start(options);
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(pg.status().message(), HasSubstr("/nonexistent/sqlgroup-pg-bin"));
  EXPECT_THAT(pg.status().message(), HasSubstr("postgresql-15"));
}

TEST(PrivatePostgres, MissingOsUserIsAFailedPreconditionWhenRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "only root switches to the OS user";
  PrivatePostgresOptions options = TestOptions();
  options.os_user = "sqlgroup-no-such-user";
  absl::StatusOr<std::unique_ptr<PrivatePostgres>> pg =
      PrivatePostgres::Start(options);
  ASSERT_FALSE(pg.ok());
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(pg.status().message(), HasSubstr("sqlgroup-no-such-user"));
}

TEST(PrivatePostgres, BaseDirTheServerUserCannotReachIsAnErrorNamingIt) {
  if (geteuid() != 0) GTEST_SKIP() << "only root switches to the OS user";
  ScopedTempDir base;
  chmod(base.path().c_str(), 0700);
  absl::StatusOr<std::unique_ptr<PrivatePostgres>> pg =
      PrivatePostgres::Start(TestOptions(base.path()));
  ASSERT_FALSE(pg.ok());
  EXPECT_THAT(pg.status().message(), HasSubstr(base.path().string()));
  EXPECT_THAT(pg.status().message(), HasSubstr("Permission denied"));
  EXPECT_TRUE(ClusterDirs(base.path()).empty()) << "left its directory";
}

TEST(PrivatePostgres, CreateDatabaseRejectsBadNamesAndDuplicates) {
  PrivatePostgres& pg = SharedPostgres();
  for (const std::string& bad :
       {std::string(""), std::string("1abc"), std::string("a-b"),
        std::string("x; DROP DATABASE postgres"), std::string(64, 'a')}) {
    EXPECT_EQ(pg.CreateDatabase(bad).code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  std::string name = "dup_" + std::to_string(getpid());
  ASSERT_TRUE(pg.CreateDatabase(name).ok());
  absl::Status again = pg.CreateDatabase(name);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_EQ(QueryValue(pg.Dsn(name), "SELECT current_database()"), name);
  Exec(pg.Dsn(), "DROP DATABASE " + name + " WITH (FORCE)");
}

TEST(TestDatabase, ExistsWhileInScopeAndIsDroppedAfter) {
  std::string sql;
  std::optional<pqxx::connection> left_open;  // outlives db: FORCE ends it
  {
    TestDatabase db;
    EXPECT_THAT(db.name(), StartsWith("t_"));
    EXPECT_EQ(db.name().size(), 18u);
    EXPECT_EQ(db.dsn(), SharedPostgres().Dsn(db.name()));
    EXPECT_EQ(QueryValue(db.dsn(), "SELECT current_database()"), db.name());
    sql =
        "SELECT count(*) FROM pg_database WHERE datname = '" + db.name() + "'";
    EXPECT_EQ(QueryValue(SharedPostgres().Dsn(), sql), "1");
    left_open.emplace(db.dsn());
    TestDatabase other;
    EXPECT_NE(other.name(), db.name());
  }
  EXPECT_EQ(QueryValue(SharedPostgres().Dsn(), sql), "0");
}

// A directory given keeps its cluster: the next Start finds it and serves
// the same data; a directory that holds anything else is refused, intact.
TEST(PrivatePostgres, ADirectoryGivenKeepsItsClusterForTheNextStart) {
  ScopedTempDir base;
  const std::string dir = (base.path() / "cluster").string();
  PrivatePostgresOptions options;
  options.base_dir = base.path().string();
  options.durable = false;
  options.dir = dir;
  {
    auto pg = PrivatePostgres::Start(options);
    ASSERT_TRUE(pg.ok()) << pg.status();
    EXPECT_FALSE((*pg)->reused());
    EXPECT_TRUE((*pg)->kept());
    EXPECT_EQ((*pg)->data_dir(), dir + "/data");
    Exec((*pg)->Dsn(),
         "CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)");
    ASSERT_TRUE((*pg)->Stop().ok());
  }
  ASSERT_TRUE(fs::exists(dir + "/data/PG_VERSION"));
  EXPECT_FALSE(fs::exists(dir + "/owner.pid")) << "taken for a stale one";
  {
    auto pg = PrivatePostgres::Start(options);
    ASSERT_TRUE(pg.ok()) << pg.status();
    EXPECT_TRUE((*pg)->reused());
    pqxx::connection conn((*pg)->Dsn());
    pqxx::nontransaction tx(conn);
    EXPECT_EQ(tx.exec1("SELECT n FROM kept")[0].as<int>(), 7);
  }
  const std::string foreign = (base.path() / "foreign").string();
  fs::create_directories(foreign);
  std::ofstream(foreign + "/notes.txt") << "mine";
  options.dir = foreign;
  auto refused = PrivatePostgres::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("is not empty"));
  EXPECT_TRUE(fs::exists(foreign + "/notes.txt"));
  // A cluster it did not make is not adopted either.
  const std::string other = (base.path() / "other").string();
  fs::create_directories(other + "/data");
  std::ofstream(other + "/data/PG_VERSION") << "15\n";
  options.dir = other;
  refused = PrivatePostgres::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("is not empty"));
}

TEST(PrivatePostgres, KeepLeavesTheTemporaryDirectory) {
  ScopedTempDir base;
  PrivatePostgresOptions options;
  options.base_dir = base.path().string();
  options.durable = false;
  options.keep = true;
  auto pg = PrivatePostgres::Start(options);
  ASSERT_TRUE(pg.ok()) << pg.status();
  const fs::path root = fs::path((*pg)->data_dir()).parent_path();
  // No owner recorded even while it runs: if this process died without
  // Stop(), the next Start under the same base would not remove it.
  EXPECT_FALSE(fs::exists(root / "owner.pid"));
  ASSERT_TRUE((*pg)->Stop().ok());
  EXPECT_TRUE(fs::exists(root / "data/PG_VERSION"));
  // And it is a directory a later run may reuse (--data_dir).
  options.keep = false;
  options.dir = root.string();
  auto again = PrivatePostgres::Start(options);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->reused());
}

TEST(PrivatePostgres, APortGivenIsUsedOrRefusedWhenTaken) {
  ScopedTempDir base;
  PrivatePostgresOptions options;
  options.base_dir = base.path().string();
  options.durable = false;
  auto first = PrivatePostgres::Start(options);
  ASSERT_TRUE(first.ok()) << first.status();
  options.port = (*first)->port();
  auto second = PrivatePostgres::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("port ", options.port,
                                     " on 127.0.0.1 is in use")));
  const int port = options.port;
  ASSERT_TRUE((*first)->Stop().ok());
  auto again = PrivatePostgres::Start(options);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->port(), port);
}

}  // namespace
}  // namespace sqlgroup
