// Connections follow work (issue 22, invariant 9): a member never holds
// more connections than its budget, holds one when idle, still makes
// progress on that one, and waits out a server that refuses connections
// (SQLSTATE 53300) without losing its session or an item.
#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sqlgroup/shared_heartbeat.h"
#include "support/consumer_fixture.h"
#include "support/subprocess.h"

namespace sqlgroup::testing {
namespace {

class ConnectionsTest : public ConsumerFixture {
 protected:
  // Backends of this test's database opened by members (control, worker
  // and listen connections; not the check of Consumer::Create, nor ours).
  static constexpr char kMemberBackendsSql[] =
      "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND "
      "(application_name IN ('sqlgroup-control', 'sqlgroup-listen') OR "
      "application_name LIKE 'sqlgroup-worker-%')";

  // One item whose handler keeps its connection for 3 s, in a group of one
  // part with the shortest TTL a group may have (two heartbeat intervals,
  // 800 ms): the member, with `o` and one worker, must keep its session
  // and call the handler once.
  void ExpectASlowHandlerOutlivesTheTtl(ConsumerOptions o) {
    CreateGroup("g", 1, /*ttl=*/absl::Milliseconds(800));  // 2 x 400 ms
    auto calls = std::make_shared<std::atomic<int>>(0);
    o.handler = [calls](const Item&, AckTransaction& ack) {
      ++*calls;
      absl::SleepFor(absl::Seconds(3));
      ack.work().exec("SELECT 1");  // the handler's statement: a transaction
      return absl::OkStatus();
    };
    o.workers = 1;
    auto a = Start(std::move(o));
    ASSERT_NE(a, nullptr);
    ASSERT_TRUE(Settles("g", 1, {a.get()}));
    const std::string session = a->session_id();
    Produce("g", 1);
    ASSERT_TRUE(Drained(absl::Seconds(30)));
    EXPECT_EQ(a->stats().sessions_lost, 0);
    EXPECT_EQ(a->session_id(), session);
    EXPECT_EQ(calls->load(), 1);
    EXPECT_TRUE(a->Stop().ok());
  }

  int64_t MemberBackends() {
    pqxx::nontransaction tx(*conn_);
    return tx.exec_params1(kMemberBackendsSql, db_.name())[0].as<int64_t>();
  }

  // Samples MemberBackends() every few milliseconds on its own thread.
  class PeakSampler {
   public:
    explicit PeakSampler(ConnectionsTest* test)
        : thread_([this, dsn = test->db_.dsn(), name = test->db_.name()] {
            pqxx::connection conn(dsn);
            while (!stop_) {
              pqxx::nontransaction tx(conn);
              const int64_t n =
                  tx.exec_params1(kMemberBackendsSql, name)[0].as<int64_t>();
              peak_ = std::max<int64_t>(peak_, n);
              absl::SleepFor(absl::Milliseconds(2));
            }
          }) {}
    ~PeakSampler() { Stop(); }
    int64_t Stop() {
      stop_ = true;
      if (thread_.joinable()) thread_.join();
      return peak_;
    }

   private:
    std::atomic<bool> stop_{false};
    std::atomic<int64_t> peak_{0};
    std::thread thread_;
  };

  static Handler Slow(const std::string& group, absl::Duration d) {
    return [group, d](const Item& item, AckTransaction& ack) {
      absl::SleepFor(d);
      ack.work().exec_params(
          "INSERT INTO results (grp, id, part) VALUES ($1, $2::uuid, $3)",
          group, item.id, item.part);
      return absl::OkStatus();
    };
  }

  void ExpectEachOnce(int n) {
    EXPECT_EQ(Count("SELECT count(*) FROM results"), n);
    EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM results"), n);
    EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 0);
  }
};

TEST_F(ConnectionsTest, StaysWithinItsBudgetUnderLoadAndHoldsOneWhenIdle) {
  CreateGroup("g", 8);
  ConsumerOptions o = Options("g", Slow("g", absl::Milliseconds(1)));
  o.workers = 4;
  o.max_connections = 2;
  o.idle_connection_timeout = absl::Milliseconds(500);
  auto member = Start(std::move(o));
  ASSERT_NE(member, nullptr);
  ASSERT_TRUE(Settles("g", 8, {member.get()}));
  PeakSampler sampler(this);
  Produce("g", 1500);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  const int64_t sampled = sampler.Stop();
  const ConsumerStats busy = member->stats();
  // The bound, counted by the member, and seen from the server (where a
  // connection just closed can still be listed for a moment next to the
  // one that replaced it: one more is allowed there).
  EXPECT_LE(busy.peak_connections, 2);
  EXPECT_LE(sampled, 3);
  // The work used the budget: a worker's own connection beside the control
  // connection (lent to the workers for probes).
  EXPECT_EQ(busy.peak_connections, 2);
  ExpectEachOnce(1500);
  // Idle: worker connections close, the control connection stays. (The
  // server sees a connection gone a moment before the member counts it
  // closed, PartWorker::CloseOwn: both are waited for.)
  EXPECT_TRUE(WaitFor(
      [&] { return MemberBackends() == 1 && member->stats().connections == 1; },
      absl::Seconds(10)))
      << MemberBackends() << " connections on the server while idle, "
      << member->stats().connections << " counted by the member";
  EXPECT_EQ(member->stats().sessions_lost, 0);
  // describe shows what the member holds and its budget (reported within
  // a second of a change, on the control thread's next round).
  EXPECT_TRUE(WaitFor(
      [&] {
        auto d = admin_->DescribeGroup("g");
        return d.ok() && d->members.size() == 1 &&
               d->members[0].connections == 1 &&
               d->members[0].connection_budget == 2;
      },
      absl::Seconds(5)));
  EXPECT_TRUE(member->Stop().ok());
  // A stopped member keeps no connection (backends leave the server's
  // list a moment after their client closed).
  EXPECT_TRUE(WaitFor([&] { return MemberBackends() == 0; }, absl::Seconds(5)));
}

TEST_F(ConnectionsTest, ABudgetOfOneRunsEverythingOnTheControlConnection) {
  CreateGroup("g", 4);
  ConsumerOptions o = Options("g", Slow("g", absl::Milliseconds(1)));
  o.workers = 3;
  o.max_connections = 1;
  auto member = Start(std::move(o));
  ASSERT_NE(member, nullptr);
  PeakSampler sampler(this);
  Produce("g", 400);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  EXPECT_LE(sampler.Stop(), 1);
  const ConsumerStats s = member->stats();
  EXPECT_EQ(s.peak_connections, 1);
  EXPECT_GE(s.borrowed_tasks, 1);
  EXPECT_EQ(s.sessions_lost, 0) << "heartbeats waited behind the workers";
  ExpectEachOnce(400);
  EXPECT_TRUE(member->Stop().ok());
}

// The first claim after a quiet spell runs on the control connection
// (warm: no connection to open on the item's path). A handler there that
// outlasts a heartbeat holds up nothing: the control thread leaves that
// connection to the worker and goes on with a new one, within the budget,
// so the session lives and a member joining meanwhile gets its parts
// before the handler is done (all but the handler's own part, should that
// be one of them: it follows once the handler returned, so that the item
// never runs on both).
TEST_F(ConnectionsTest, ASlowHandlerOnTheControlConnectionHoldsUpNothing) {
  CreateGroup("g", 4, /*ttl=*/absl::Seconds(2));
  {
    pqxx::work tx(*conn_);
    tx.exec("CREATE TABLE handled_on (id uuid, app text, at timestamptz)");
    tx.exec(
        absl::StrCat("GRANT INSERT ON handled_on TO ", testing::kMemberRole));
    tx.commit();
  }
  // Both members' (the item's part may move to the one joining).
  const Handler slow = [](const Item& item, AckTransaction& ack) {
    absl::SleepFor(absl::Seconds(6));
    ack.work().exec_params(
        "INSERT INTO handled_on VALUES ($1::uuid, "
        "current_setting('application_name'), clock_timestamp())",
        item.id);
    return absl::OkStatus();
  };
  ConsumerOptions o = Options("g", slow);
  o.workers = 1;
  o.max_connections = 2;
  auto a = Start(std::move(o));
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(Settles("g", 4, {a.get()}));
  // Quiet: the worker's own connection, if the join's claims opened one,
  // closed after its idle timeout (under a loaded machine the join's work
  // can end after Settles, and the item would find that connection).
  ASSERT_TRUE(
      WaitFor([&] { return a->stats().connections == 1; }, absl::Seconds(10)));
  const std::string session = a->session_id();
  PeakSampler sampler(this);
  Produce("g", 1);
  absl::SleepFor(absl::Milliseconds(500));  // the handler has begun
  ConsumerOptions ob = Options("g", slow);
  ob.workers = 1;
  ob.max_connections = 2;
  auto b = Start(std::move(ob));
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return !b->owned_parts().empty(); }, absl::Seconds(5)));
  EXPECT_EQ(Count("SELECT count(*) FROM handled_on"), 0)
      << "the join waited for the handler";
  ASSERT_TRUE(Settles("g", 4, {a.get(), b.get()}));
  ASSERT_TRUE(Drained(absl::Seconds(30)));
  EXPECT_EQ(Count("SELECT count(*) FROM handled_on WHERE app = "
                  "'sqlgroup-control'"),
            1)
      << "the first claim did not run on the control connection";
  const ConsumerStats s = a->stats();
  EXPECT_EQ(s.sessions_lost, 0);
  EXPECT_EQ(a->session_id(), session);
  EXPECT_LE(s.peak_connections, 2);
  EXPECT_LE(b->stats().peak_connections, 2);
  // Two budgets of two (a connection just closed may still be listed).
  EXPECT_LE(sampler.Stop(), 5);
  EXPECT_TRUE(a->Stop().ok());
  EXPECT_TRUE(b->Stop().ok());
}

// The control thread must go on with a new connection before the TTL
// ends, not an interval after a late heartbeat (which is the TTL then).
TEST_F(ConnectionsTest,
       ASlowHandlerOnTheControlConnectionOutlivesTheShortestTtl) {
  ConsumerOptions o = Options("g", nullptr);
  o.max_connections = 2;
  ExpectASlowHandlerOutlivesTheTtl(std::move(o));
}

// With no connection to spare (a budget of one: the worker borrows the
// control connection for its items, and lends no slot with it), no new
// one can be opened: the member heartbeats through the process's shared
// heartbeat meanwhile.
TEST_F(ConnectionsTest,
       AMemberWithoutASpareConnectionHeartbeatsThroughTheSharedOne) {
  ConsumerOptions o = Options("g", nullptr);
  o.max_connections = 1;
  auto shared = SharedHeartbeat::Create({o.dsn});
  ASSERT_TRUE(shared.ok()) << shared.status();
  o.shared_heartbeat = *shared;
  ExpectASlowHandlerOutlivesTheTtl(std::move(o));
}

TEST_F(ConnectionsTest, SharedBudgetRefusesAConsumerWithoutASlot) {
  CreateGroup("g", 4);
  auto budget = ConnectionBudget::Create(1);
  ASSERT_TRUE(budget.ok());
  ConsumerOptions o = Options("g", Recorder("g"));
  o.connection_budget = *budget;
  auto first = Start(o);
  ASSERT_NE(first, nullptr);
  auto refused = Consumer::Create(o);
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_TRUE(first->Stop().ok());
  // The slot is free again.
  auto second = Start(o);
  ASSERT_NE(second, nullptr);
  EXPECT_TRUE(second->Stop().ok());
}

// A role whose connection limit the test fills: the server answers 53300
// ("too many connections for role"), as a full server would.
class FullServerTest : public ConnectionsTest {
 protected:
  void SetUp() override {
    ConnectionsTest::SetUp();
    ASSERT_TRUE(admin_->GrantRoles({.member_role = role_.name()}).ok());
    ExecSql(db_.dsn(),
            absl::StrCat("GRANT INSERT, SELECT ON results TO ", role_.name()));
    dsn_ = role_.Dsn(db_.name());
  }

  void LimitRole(int n) {
    ExecSql(db_.dsn(),
            absl::StrCat("ALTER ROLE ", role_.name(), " CONNECTION LIMIT ", n));
  }

  // Opens connections as the role until the server refuses one.
  void FillRole() {
    for (int i = 0; i < 50; ++i) {
      try {
        fillers_.push_back(std::make_unique<pqxx::connection>(dsn_));
      } catch (const std::exception& e) {
        ASSERT_NE(std::string(e.what()).find("too many connections"),
                  std::string::npos)
            << e.what();
        return;
      }
    }
    FAIL() << "the role's connection limit did not hold";
  }

  TestRole role_;
  std::string dsn_;
  std::vector<std::unique_ptr<pqxx::connection>> fillers_;
};

TEST_F(FullServerTest, AMemberFacing53300KeepsItsSessionAndLosesNothing) {
  CreateGroup("g", 8);
  LimitRole(3);
  ConsumerOptions o = Options("g", Slow("g", absl::Milliseconds(1)));
  o.dsn = dsn_;
  o.workers = 3;
  o.max_connections = 3;
  o.idle_connection_timeout = absl::Milliseconds(300);
  auto member = Start(std::move(o));
  ASSERT_NE(member, nullptr);
  ASSERT_TRUE(Settles("g", 8, {member.get()}));
  const std::string session = member->session_id();
  // The control connection is open; the rest of the role's limit is
  // taken: every worker connection is refused.
  FillRole();
  Produce("g", 300);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  const ConsumerStats full = member->stats();
  EXPECT_GT(full.connections_refused, 0);
  EXPECT_GT(full.borrowed_tasks, 0);
  EXPECT_EQ(full.sessions_lost, 0);
  EXPECT_EQ(member->session_id(), session);
  ExpectEachOnce(300);
  // Connections free up: workers get their own again, by themselves (after
  // their backoff, up to 5 s), while items keep coming.
  fillers_.clear();
  int produced = 300;
  EXPECT_TRUE(WaitFor(
      [&] {
        Produce("g", 50);
        produced += 50;
        return member->stats().connections > 1;
      },
      absl::Seconds(20), absl::Milliseconds(200)));
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  EXPECT_EQ(member->session_id(), session);
  EXPECT_EQ(Count("SELECT count(*) FROM results"), produced);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM results"), produced);
  EXPECT_TRUE(member->Stop().ok());
}

TEST_F(FullServerTest, TheCliWaitsForAFullServerAndJoinsWhenItCan) {
  CreateGroup("g", 4);
  LimitRole(2);
  FillRole();
  const std::string log = absl::StrCat(::testing::TempDir(), "full-cli.log");
  std::remove(log.c_str());
  ChildProcess consume({CliPath(), "consume", "--group=g", "--metrics_addr=",
                        "--handler=noop", absl::StrCat("--dsn=", dsn_)},
                       log);
  // It waits, politely: still running, and said so once.
  absl::SleepFor(absl::Seconds(3));
  ASSERT_TRUE(consume.running());
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.sessions"), 0);
  fillers_.clear();
  ASSERT_TRUE(WaitFor(
      [&] { return Count("SELECT count(*) FROM sqlgroup.sessions") == 1; },
      absl::Seconds(20)))
      << consume.Log();
  Produce("g", 100);
  EXPECT_TRUE(Drained(absl::Seconds(30))) << consume.Log();
  consume.Signal(SIGTERM);
  EXPECT_EQ(consume.Wait(absl::Seconds(30)), 0) << consume.Log();
  const std::string text = consume.Log();
  size_t said = 0;
  for (size_t at = text.find("waiting for the server"); at != std::string::npos;
       at = text.find("waiting for the server", at + 1)) {
    ++said;
  }
  EXPECT_EQ(said, 1u) << text;
}

}  // namespace
}  // namespace sqlgroup::testing
