// Members, producers and the CLI through a real PgBouncer (Debian's 1.18):
// in transaction mode (no named prepared statements, no session state
// kept between transactions) and in session mode.
#include <signal.h>

#include <map>
#include <string>
#include <vector>

#include "support/consumer_fixture.h"
#include "support/pgbouncer_fixture.h"
#include "support/subprocess.h"

namespace sqlgroup::testing {
namespace {

// What PoolMode::kAuto logs when it finds a pooler (src/pool_mode.cc).
constexpr char kPoolerFound[] = "connects through a connection pooler";

class PoolerTest : public ConsumerFixture {
 protected:
  void SetUp() override {
    ConsumerFixture::SetUp();
    pqxx::work tx(*conn_);
    // Every acknowledgement of a keyed item, in commit order per key.
    tx.exec(
        "CREATE TABLE acks (seq bigserial, key text, n int, id uuid, "
        "backend int)");
    tx.exec(absl::StrCat("GRANT INSERT, SELECT ON acks TO ", kMemberRole,
                         "; GRANT USAGE ON SEQUENCE acks_seq_seq TO ",
                         kMemberRole));
    // The same row, from a SQL function handler (sql:public.ack_item).
    tx.exec(
        "CREATE FUNCTION public.ack_item(k text, p bytea, i uuid) RETURNS "
        "void LANGUAGE sql AS $$ INSERT INTO acks (key, n, id, backend) "
        "VALUES (k, convert_from(p, 'UTF8')::int, i, pg_backend_pid()) $$");
    tx.exec(
        "CREATE FUNCTION public.ack_items(k text[], p bytea[], i uuid[]) "
        "RETURNS void LANGUAGE sql AS $$ INSERT INTO acks (key, n, id, "
        "backend) SELECT u.k, convert_from(u.p, 'UTF8')::int, u.i, "
        "pg_backend_pid() FROM unnest(k, p, i) WITH ORDINALITY AS u(k, p, i, "
        "o) ORDER BY u.o $$");
    tx.commit();
  }

  // `sqlgroup consume --handler=<handler>` through a pooler in
  // transaction mode with two server connections: every item once, each
  // key in order, on those two connections.
  // Without --pool_mode (auto), the members find the pooler themselves and
  // say so once each.
  void ExpectTheCliConsumesThroughATransactionPooler(
      const std::string& handler, bool batch = false,
      const std::string& pool_mode = "transaction") {
    TestPgBouncer bouncer("transaction", 2);
    ASSERT_TRUE(bouncer.ok());
    CreateGroup("g", 8);
    ProduceKeyed(bouncer.Via(db_.dsn()), PoolMode::kTransaction, "g", 300, 10);
    const std::string log =
        absl::StrCat(::testing::TempDir(), "pooled-cli.log");
    std::remove(log.c_str());
    std::vector<std::string> argv = {
        CliPath(),
        "consume",
        "--group=g",
        "--members=2",
        "--workers=2",
        "--metrics_addr=",
        "--handler=" + handler,
        absl::StrCat("--dsn=", bouncer.Via(member_dsn_))};
    if (batch) argv.push_back("--batch");
    if (!pool_mode.empty()) argv.push_back("--pool_mode=" + pool_mode);
    ChildProcess consume(argv, log);
    ASSERT_TRUE(Drained(absl::Seconds(60))) << consume.Log();
    consume.Signal(SIGTERM);
    EXPECT_EQ(consume.Wait(absl::Seconds(30)), 0) << consume.Log();
    const std::string said = consume.Log();
    size_t found = 0;
    for (size_t at = said.find(kPoolerFound); at != std::string::npos;
         at = said.find(kPoolerFound, at + 1)) {
      ++found;
    }
    // Auto: one line per member; explicit: none. And nothing about
    // prepared statements that exist already or not at all.
    EXPECT_EQ(found, pool_mode.empty() ? 2u : 0u) << said;
    EXPECT_EQ(said.find("prepared statement"), std::string::npos) << said;
    ExpectExactlyOnceInOrder(300);
    EXPECT_LE(Count("SELECT count(DISTINCT backend) FROM acks"), 2);
  }

  // Writes a row of `acks` in the acknowledging transaction.
  static Handler AckRecorder() {
    return [](const Item& item, AckTransaction& ack) {
      ack.work().exec_params(
          "INSERT INTO acks (key, n, id, backend) "
          "VALUES ($1, $2::int, $3::uuid, pg_backend_pid())",
          item.key.value_or(""), item.payload, item.id);
      return absl::OkStatus();
    };
  }

  // `n` items over `keys` keys, numbered 0.. per key in the payload,
  // enqueued through `dsn` in batches of 50.
  void ProduceKeyed(const std::string& dsn, PoolMode mode,
                    const std::string& group, int n, int keys) {
    auto p = Producer::Create({.dsn = dsn, .group = group, .pool_mode = mode});
    ASSERT_TRUE(p.ok()) << p.status();
    std::map<int, int> next;
    for (int i = 0; i < n; i += 50) {
      std::vector<NewItem> batch;
      for (int j = i; j < std::min(n, i + 50); ++j) {
        NewItem item;
        item.key = absl::StrCat("k", j % keys);
        item.payload = std::to_string(next[j % keys]++);
        batch.push_back(std::move(item));
      }
      ASSERT_TRUE((*p)->Enqueue(batch).ok());
    }
  }

  // Every item acknowledged once, and each key's in order.
  void ExpectExactlyOnceInOrder(int n) {
    EXPECT_EQ(Count("SELECT count(*) FROM acks"), n);
    EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM acks"), n);
    EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 0);
    EXPECT_EQ(Count("SELECT count(*) FROM (SELECT n, lag(n) OVER "
                    "(PARTITION BY key ORDER BY seq) AS before FROM acks) s "
                    "WHERE n <> before + 1"),
              0)
        << "a key's items were acknowledged out of order";
  }

  // Backends of this test's database named as a direct member names its
  // control connection.
  int64_t ControlConnections() {
    return Count(absl::StrCat(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
        "'sqlgroup-control' AND datname = '",
        db_.name(), "'"));
  }

  // Backends of this test's database whose last statement was a LISTEN,
  // by application_name.
  std::map<std::string, int64_t> Listening() {
    pqxx::nontransaction tx(*conn_);
    std::map<std::string, int64_t> out;
    for (const auto& row : tx.exec_params(
             "SELECT application_name, count(*) FROM pg_stat_activity "
             "WHERE datname = $1 AND query ILIKE 'LISTEN%' GROUP BY 1",
             db_.name())) {
      out[row[0].as<std::string>()] = row[1].as<int64_t>();
    }
    return out;
  }
};

TEST_F(PoolerTest, ConsumesExactlyOnceInKeyOrderThroughATransactionPooler) {
  // Two server connections for three members of three connections each
  // and a producer: consecutive transactions of one client land on
  // different server connections all the time.
  TestPgBouncer bouncer("transaction", 2);
  ASSERT_TRUE(bouncer.ok());
  const std::string pooled = bouncer.Via(member_dsn_);
  CreateGroup("g", 8);
  // The producer finds the pooler by itself too.
  ProduceKeyed(bouncer.Via(db_.dsn()), PoolMode::kAuto, "g", 600, 20);
  std::vector<std::unique_ptr<Consumer>> members;
  for (int i = 0; i < 3; ++i) {
    ConsumerOptions o = Options("g", AckRecorder());
    o.dsn = pooled;
    // Two say it, one finds out (PoolMode::kAuto, the default).
    if (i < 2) o.pool_mode = PoolMode::kTransaction;
    members.push_back(Start(std::move(o)));
    ASSERT_NE(members.back(), nullptr);
  }
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  ASSERT_TRUE(
      Settles("g", 8, {members[0].get(), members[1].get(), members[2].get()}));
  for (auto& m : members) EXPECT_TRUE(m->Stop().ok());
  ExpectExactlyOnceInOrder(600);
  // The acks ran on the pooler's two server connections, not on one per
  // client: the test did exercise the pooling.
  EXPECT_LE(Count("SELECT count(DISTINCT backend) FROM acks"), 2);
  // No LISTEN went through the pooler: it would have pinned a server
  // connection's session for nobody.
  EXPECT_TRUE(Listening().empty());
  // The graceful leaves went through too.
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.sessions"), 0);
}

TEST_F(PoolerTest, ListensOnTheListenDsnAndWakesOnANotify) {
  TestPgBouncer bouncer("transaction", 4);
  ASSERT_TRUE(bouncer.ok());
  CreateGroup("g", 4);
  ConsumerOptions o = Options("g", AckRecorder());
  o.dsn = bouncer.Via(member_dsn_);
  o.pool_mode = PoolMode::kTransaction;
  o.listen_dsn = member_dsn_;
  // Without a NOTIFY an item would wait for a probe a minute away.
  o.idle_poll = absl::Seconds(60);
  o.idle_poll_listening = absl::Seconds(60);
  auto member = Start(std::move(o));
  ASSERT_NE(member, nullptr);
  ASSERT_TRUE(Settles("g", 4, {member.get()}));
  ASSERT_TRUE(WaitFor([&] { return Listening()["sqlgroup-listen"] == 1; },
                      absl::Seconds(10)))
      << "no backend named sqlgroup-listen whose last statement is LISTEN";
  // Past the probe that follows the takes.
  absl::SleepFor(absl::Seconds(1));
  ProduceKeyed(bouncer.Via(db_.dsn()), PoolMode::kTransaction, "g", 5, 5);
  EXPECT_TRUE(Drained(absl::Seconds(20)))
      << "the producer's NOTIFY did not wake the member";
  EXPECT_TRUE(member->Stop().ok());
  ExpectExactlyOnceInOrder(5);
}

TEST_F(PoolerTest, CliConsumesWithASqlHandlerThroughATransactionPooler) {
  ExpectTheCliConsumesThroughATransactionPooler(
      "sql:INSERT INTO acks (key, n, id, backend) VALUES ($1, "
      "convert_from($2, 'UTF8')::int, $3, pg_backend_pid())");
}

// The default: no flag, and the members find the pooler.
TEST_F(PoolerTest, CliFindsATransactionPoolerWithoutAFlag) {
  ExpectTheCliConsumesThroughATransactionPooler("sql:public.ack_item",
                                                /*batch=*/false,
                                                /*pool_mode=*/"");
}

// Called by the ack's own statement, prepared on each server connection
// the first time it runs there.
TEST_F(PoolerTest, CliConsumesWithASqlFunctionThroughATransactionPooler) {
  ExpectTheCliConsumesThroughATransactionPooler("sql:public.ack_item");
}

// Once per batch, on arrays in key order.
TEST_F(PoolerTest, CliConsumesWithASqlFunctionOfBatchesThroughAPooler) {
  ExpectTheCliConsumesThroughATransactionPooler("sql:public.ack_items",
                                                /*batch=*/true);
}

TEST_F(PoolerTest, ATransactionPoolerRestartLosesAndRepeatsNothing) {
  TestPgBouncer bouncer("transaction", 3);
  ASSERT_TRUE(bouncer.ok());
  CreateGroup("g", 8, absl::Seconds(3));
  std::vector<std::unique_ptr<Consumer>> members;
  for (int i = 0; i < 2; ++i) {
    ConsumerOptions o = Options("g", [](const Item& item, AckTransaction& ack) {
      absl::SleepFor(absl::Milliseconds(2));  // keeps work in flight
      return AckRecorder()(item, ack);
    });
    o.dsn = bouncer.Via(member_dsn_);
    o.pool_mode = PoolMode::kTransaction;
    members.push_back(Start(std::move(o)));
    ASSERT_NE(members.back(), nullptr);
  }
  ProduceKeyed(bouncer.Via(db_.dsn()), PoolMode::kTransaction, "g", 400, 16);
  ASSERT_TRUE(WaitFor([&] { return Count("SELECT count(*) FROM acks") > 50; },
                      absl::Seconds(30)));
  ASSERT_TRUE(bouncer.Restart());
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  for (auto& m : members) EXPECT_TRUE(m->Stop().ok());
  ExpectExactlyOnceInOrder(400);
}

TEST_F(PoolerTest, ASessionPoolerWorksDirectOrFound) {
  TestPgBouncer bouncer("session", 8);
  ASSERT_TRUE(bouncer.ok());
  CreateGroup("g", 4);
  // Said to be direct: everything as on a direct connection, LISTEN too.
  ConsumerOptions o = Options("g", AckRecorder());
  o.dsn = bouncer.Via(member_dsn_);
  o.pool_mode = PoolMode::kDirect;
  auto direct = Start(std::move(o));
  ASSERT_NE(direct, nullptr);
  // Found out: taken for a pooler in transaction mode, which works too.
  o = Options("g", AckRecorder());
  o.dsn = bouncer.Via(member_dsn_);
  auto found = Start(std::move(o));
  ASSERT_NE(found, nullptr);
  ASSERT_TRUE(Settles("g", 4, {direct.get(), found.get()}));
  ProduceKeyed(bouncer.Via(db_.dsn()), PoolMode::kDirect, "g", 100, 10);
  ASSERT_TRUE(Drained(absl::Seconds(30)));
  // Only the member said to be direct set up its session (and names its
  // connections by kind).
  EXPECT_EQ(ControlConnections(), 1);
  EXPECT_TRUE(direct->Stop().ok());
  EXPECT_TRUE(found->Stop().ok());
  ExpectExactlyOnceInOrder(100);
}

// Straight to the server, PoolMode::kAuto (the default) finds no pooler:
// the member's connections are set up as direct ones (a session SET names
// each kind; behind a pooler all are "sqlgroup") and it wakes on NOTIFY.
TEST_F(PoolerTest, AutoFindsADirectConnection) {
  CreateGroup("g", 2);
  ConsumerOptions o = Options("g", AckRecorder());
  ASSERT_EQ(o.pool_mode, PoolMode::kAuto);
  // Without a NOTIFY an item would wait a minute.
  o.idle_poll = absl::Seconds(60);
  o.idle_poll_listening = absl::Seconds(60);
  auto member = Start(std::move(o));
  ASSERT_NE(member, nullptr);
  ASSERT_TRUE(Settles("g", 2, {member.get()}));
  absl::SleepFor(absl::Seconds(1));
  ProduceKeyed(db_.dsn(), PoolMode::kAuto, "g", 5, 5);
  EXPECT_TRUE(Drained(absl::Seconds(20))) << "no NOTIFY woke the member";
  EXPECT_EQ(ControlConnections(), 1);
  EXPECT_TRUE(member->Stop().ok());
  ExpectExactlyOnceInOrder(5);
}

}  // namespace
}  // namespace sqlgroup::testing
