// Operating the items against a real PostgreSQL, with running members:
// dead letters listed, shown, requeued (at their original place or at
// their key's tail, the order checked from the database) and purged, by
// the CLI and by the SQL functions as the least-privilege operator role;
// members and producers refused them; pauses of a group and of a key that
// hold within a second under load, through a member's restart and a
// rebalance, until resumed.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <pqxx/pqxx>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/producer.h"
#include "support/consumer_fixture.h"
#include "support/subprocess.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using testing::RunCli;
using testing::TestRole;
using testing::WaitFor;

class OperateTest : public testing::ConsumerFixture {
 protected:
  void SetUp() override {
    ConsumerFixture::SetUp();
    CreateAcksTable();
  }

  // Acknowledges each item by recording its payload in `acks`, except
  // the payloads in `poison` while `poisoned` is set, which it
  // dead-letters at once.
  Handler Acker(std::shared_ptr<std::atomic<bool>> poisoned,
                std::vector<std::string> poison) {
    return [poisoned, poison](const Item& item, AckTransaction& ack) {
      if (*poisoned && std::find(poison.begin(), poison.end(), item.payload) !=
                           poison.end()) {
        return DeadLetterVerdict("poison: the downstream refused it");
      }
      ack.work().exec_params("INSERT INTO acks (payload) VALUES ($1)",
                             item.payload);
      return absl::OkStatus();
    };
  }

  void EnqueueKeyed(const std::string& group, const std::string& key, int from,
                    int to) {
    pqxx::work tx(*conn_);
    for (int i = from; i < to; ++i) {
      tx.exec_params("SELECT sqlgroup.enqueue($1, $2, $3::bytea)", group, key,
                     absl::StrCat(key, ":", i));
    }
    tx.commit();
  }

  int64_t Acked() { return Count("SELECT count(*) FROM acks"); }
  int64_t Dead() { return Count("SELECT count(*) FROM sqlgroup.dead_items"); }

  // The id of the dead letter with `payload`.
  std::string DeadId(const std::string& payload) {
    pqxx::nontransaction tx(*conn_);
    return tx
        .exec_params1(
            "SELECT id::text FROM sqlgroup.dead_items "
            "WHERE payload = $1::bytea",
            payload)[0]
        .as<std::string>();
  }

  // A login role with `kind` grants ("operator", "producer").
  void Grant(const TestRole& role, const std::string& kind) {
    RoleGrants g;
    (kind == "operator" ? g.operator_role : g.producer_role) = role.name();
    ASSERT_TRUE(admin_->GrantRoles(g).ok());
  }
};

TEST_F(OperateTest, DeadLettersThroughCliAndSqlAsTheOperatorOnly) {
  TestRole op, producer;
  CreateGroup("g", 4);
  Grant(op, "operator");
  Grant(producer, "producer");
  const std::string op_dsn = op.Dsn(db_.name());
  auto poisoned = std::make_shared<std::atomic<bool>>(true);
  auto c = Start(Options("g", Acker(poisoned, {"a:1", "b:0"})));
  EnqueueKeyed("g", "a", 0, 3);
  EnqueueKeyed("g", "b", 0, 2);
  ASSERT_TRUE(Drained(absl::Seconds(15)));
  ASSERT_EQ(Dead(), 2);
  ASSERT_EQ(Acked(), 3);

  // list: both, with their keys and the error; --key narrows.
  auto r = RunCli({"dead", "list", "g", "--dsn", op_dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "poison: the downstream refused it"))
      << r.out;
  r = RunCli({"dead", "list", "g", "--key", "a", "--json", "--dsn", op_dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, DeadId("a:1"))) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, DeadId("b:0"))) << r.out;
  // show: the payload as text.
  r = RunCli({"dead", "show", "g", DeadId("a:1"), "--dsn", op_dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "a:1")) << r.out;

  // What an operation acts on comes from the command line only: a
  // SQLGROUP_KEY left in the environment does not make this a key's pause.
  r = RunCli({"group", "pause", "g", "--dsn", op_dsn}, {{"SQLGROUP_KEY", "a"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "paused group g:")) << r.out;
  r = RunCli({"group", "resume", "g", "--dsn", op_dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "resumed group g;")) << r.out;

  // Neither a member nor a producer may requeue, purge or pause.
  for (const std::string& dsn : {member_dsn_, producer.Dsn(db_.name())}) {
    r = RunCli({"dead", "requeue", "g", "--all", "--dsn", dsn});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(absl::StrContains(r.err, "--operator_role")) << r.err;
    r = RunCli({"group", "pause", "g", "--dsn", dsn});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(absl::StrContains(r.err, "--operator_role")) << r.err;
  }
  // Nor may the operator touch the tables themselves.
  {
    pqxx::connection as_op(op_dsn);
    pqxx::work tx(as_op);
    EXPECT_THROW(tx.exec("DELETE FROM sqlgroup.dead_items"),
                 pqxx::insufficient_privilege);
  }
  EXPECT_EQ(Dead(), 2);

  // A dry run changes nothing; a requeue by id brings the item back, and
  // the handler, working again, acknowledges it.
  r = RunCli(
      {"dead", "requeue", "g", DeadId("a:1"), "--dry_run", "--dsn", op_dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Dead(), 2);
  *poisoned = false;
  const std::string a1 = DeadId("a:1");
  r = RunCli({"dead", "requeue", "g", a1, "--dsn", op_dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "requeued 1 dead letter")) << r.out;
  ASSERT_TRUE(WaitFor([&] { return Acked() == 4; }, absl::Seconds(5)));
  EXPECT_EQ(AckOrder("a").back(), "a:1");

  // Unknown ids change nothing and say so.
  r = RunCli({"dead", "requeue", "g", a1, DeadId("b:0"), "--dsn", op_dsn});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "has no dead letter " + a1)) << r.err;
  EXPECT_EQ(Dead(), 1);

  // The SQL function in the operator's own transaction: rolled back, the
  // dead letter stays; committed, it goes.
  {
    pqxx::connection as_op(op_dsn);
    {
      pqxx::work tx(as_op);
      EXPECT_EQ(tx.exec("SELECT * FROM sqlgroup.dead_purge('g', "
                        "all_items => true)")
                    .size(),
                1u);
      tx.abort();
    }
    EXPECT_EQ(Dead(), 1);
    pqxx::work tx(as_op);
    tx.exec("SELECT * FROM sqlgroup.dead_purge('g', of_key => 'b')");
    tx.commit();
  }
  EXPECT_EQ(Dead(), 0);
  r = RunCli({"dead", "purge", "g", "--key", "b", "--dsn", op_dsn});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "nothing was purged")) << r.err;
  EXPECT_TRUE(c->Stop().ok());
}

// Key "o" requeued at its original place goes ahead of its key's items
// that waited; key "t" requeued at the tail goes after them; a requeued
// item that fails again is dead again.
TEST_F(OperateTest, RequeueOriginalAndTailOrderTheKeyAsDocumented) {
  TestRole op;
  CreateGroup("g", 2);
  Grant(op, "operator");
  auto poisoned = std::make_shared<std::atomic<bool>>(true);
  auto c = Start(Options("g", Acker(poisoned, {"o:1", "t:1", "x:0"})));
  EnqueueKeyed("g", "o", 0, 3);
  EnqueueKeyed("g", "t", 0, 3);
  ASSERT_TRUE(Drained(absl::Seconds(15)));
  ASSERT_EQ(Dead(), 2);
  EXPECT_EQ(AckOrder("o"), (std::vector<std::string>{"o:0", "o:2"}));

  // Later items wait behind paused keys while the dead come back.
  ASSERT_TRUE(admin_->PauseGroup("g", "o").ok());
  ASSERT_TRUE(admin_->PauseGroup("g", "t").ok());
  EnqueueKeyed("g", "o", 3, 5);
  EnqueueKeyed("g", "t", 3, 5);
  *poisoned = false;
  auto op_admin = Admin::Connect({.dsn = op.Dsn(db_.name())});
  ASSERT_TRUE(op_admin.ok()) << op_admin.status();
  auto original =
      (*op_admin)->RequeueDead("g", {.key = "o"}, RequeuePosition::kOriginal);
  ASSERT_TRUE(original.ok()) << original.status();
  ASSERT_EQ(original->size(), 1u);
  EXPECT_EQ((*original)[0].new_id, (*original)[0].id);
  auto tail =
      (*op_admin)->RequeueDead("g", {.key = "t"}, RequeuePosition::kTail);
  ASSERT_TRUE(tail.ok()) << tail.status();
  ASSERT_EQ(tail->size(), 1u);
  EXPECT_GT((*tail)[0].new_id, (*tail)[0].id);
  // Listed in key order: the original one heads its key, the tail one
  // follows its key's waiting items.
  auto waiting = (*op_admin)->ListItems("g", {.key = "o"});
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  ASSERT_EQ(waiting->size(), 3u);
  EXPECT_EQ((*waiting)[0].payload, "o:1");
  EXPECT_TRUE((*waiting)[0].requeued_at.has_value());

  ASSERT_TRUE((*op_admin)->ResumeGroup("g", "o").ok());
  ASSERT_TRUE((*op_admin)->ResumeGroup("g", "t").ok());
  ASSERT_TRUE(Drained(absl::Seconds(10)));
  EXPECT_EQ(AckOrder("o"),
            (std::vector<std::string>{"o:0", "o:2", "o:1", "o:3", "o:4"}));
  EXPECT_EQ(AckOrder("t"),
            (std::vector<std::string>{"t:0", "t:2", "t:3", "t:4", "t:1"}));

  // Requeued, it may die again: a dead letter once more, died later.
  *poisoned = true;
  EnqueueKeyed("g", "x", 0, 1);
  ASSERT_TRUE(Drained(absl::Seconds(10)));
  ASSERT_EQ(Dead(), 1);
  const std::string died =
      "SELECT (extract(epoch FROM died_at) * 1000000)::bigint "
      "FROM sqlgroup.dead_items";
  const int64_t first_death = Count(died);
  auto again = (*op_admin)->RequeueDead("g", {.all = true});
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->size(), 1u);
  ASSERT_TRUE(WaitFor([&] { return Dead() == 1 && Count(died) > first_death; },
                      absl::Seconds(10)));
  EXPECT_TRUE(c->Stop().ok());
}

TEST_F(OperateTest, PauseHoldsUnderLoadThroughRestartAndRebalance) {
  CreateGroup("g", 4);
  auto poisoned = std::make_shared<std::atomic<bool>>(false);
  auto first = Start(Options("g", Acker(poisoned, {})));
  std::atomic<bool> producing{true};
  std::atomic<int> produced{0};
  std::thread producer([&] {
    pqxx::connection conn(db_.dsn());
    while (producing) {
      pqxx::work tx(conn);
      const int n = produced.fetch_add(1);
      tx.exec_params("SELECT sqlgroup.enqueue('g', $1, $2::bytea)",
                     absl::StrCat("k", n % 16), absl::StrCat("p:", n));
      tx.commit();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  ASSERT_TRUE(WaitFor([&] { return Acked() > 200; }, absl::Seconds(10)));
  ASSERT_TRUE(admin_->PauseGroup("g").ok());
  // Within a second no new item goes to a handler.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int64_t at_pause = Acked();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(Acked(), at_pause);
  // A second member joins (a rebalance) and the first restarts: still
  // paused.
  auto second = Start(Options("g", Acker(poisoned, {})));
  EXPECT_TRUE(first->Stop().ok());
  first = Start(Options("g", Acker(poisoned, {})));
  ASSERT_TRUE(Settles("g", 4, {first.get(), second.get()}));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(Acked(), at_pause);
  auto d = admin_->DescribeGroup("g", /*count_lag=*/false);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->pauses.size(), 1u);
  EXPECT_FALSE(d->pauses[0].key.has_value());

  // A paused key holds while the rest of the group goes on.
  ASSERT_TRUE(admin_->PauseGroup("g", "k3").ok());
  ASSERT_TRUE(admin_->ResumeGroup("g").ok());
  ASSERT_TRUE(
      WaitFor([&] { return Acked() > at_pause + 100; }, absl::Seconds(10)));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  // k3's payloads are p:N with N % 16 = 3; the producer goes on adding
  // them, and none is acknowledged while k3 is paused.
  const std::string k3_acked =
      "SELECT count(*) FROM acks WHERE split_part(payload, ':', 2)::int % 16 "
      "= 3";
  const int64_t k3_at_pause = Count(k3_acked);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(Count(k3_acked), k3_at_pause);
  producing = false;
  producer.join();
  // Everything but k3 drains; k3 drains once resumed.
  ASSERT_TRUE(WaitFor(
      [&] {
        return Count("SELECT count(*) FROM sqlgroup.items WHERE key <> 'k3'") ==
               0;
      },
      absl::Seconds(10)));
  EXPECT_GT(Count("SELECT count(*) FROM sqlgroup.items WHERE key = 'k3'"), 0);
  ASSERT_TRUE(admin_->ResumeGroup("g", "k3").ok());
  ASSERT_TRUE(Drained(absl::Seconds(10)));
  EXPECT_EQ(Acked(), produced.load());
  EXPECT_TRUE(first->Stop().ok());
  EXPECT_TRUE(second->Stop().ok());
}

// A claim writes nothing, so what a member read before a pause must be read
// again before it goes to a handler: behind a slow handler, the heads
// claimed at once (ordering key: queued for a worker) or the rest of a
// batch (ordering none) would otherwise keep going to it for seconds after
// the pause. No delivery begins later than the freshness of a claim (250
// ms) after the pause; what was not delivered waits, and goes once after
// the resume.
TEST_F(OperateTest, ItemsClaimedBeforeAPauseDoNotReachTheHandlerAfterIt) {
  for (const Ordering ordering : {Ordering::kKey, Ordering::kNone}) {
    const std::string group = OrderingName(ordering);
    SCOPED_TRACE(group);
    ASSERT_TRUE(
        admin_
            ->CreateGroup({.name = group,
                           .parts = 1,
                           .session_ttl = absl::Seconds(2),
                           .heartbeat_interval = absl::Milliseconds(400),
                           .ordering = ordering})
            .ok());
    for (int k = 0; k < 40; ++k) {
      EnqueueKeyed(group, absl::StrCat(group, "-k", k), 0, 1);
    }
    absl::Mutex mu;
    std::vector<absl::Time> delivered;  // when each delivery began
    ConsumerOptions o = Options(
        group, [&](const Item& item, AckTransaction& ack) -> absl::Status {
          {
            absl::MutexLock lock(&mu);
            delivered.push_back(absl::Now());
          }
          absl::SleepFor(absl::Milliseconds(150));
          ack.work().exec_params("INSERT INTO acks (payload) VALUES ($1)",
                                 item.payload);
          return absl::OkStatus();
        });
    o.workers = 1;
    const auto delivered_since = [&](absl::Time t) {
      absl::MutexLock lock(&mu);
      return std::count_if(delivered.begin(), delivered.end(),
                           [&](absl::Time d) { return d > t; });
    };
    auto member = Start(o);
    ASSERT_TRUE(
        WaitFor([&] { return delivered_since(absl::InfinitePast()) >= 3; },
                absl::Seconds(20)));
    ASSERT_TRUE(admin_->PauseGroup(group).ok());
    const absl::Time paused = absl::Now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    // The delivery in flight finishes; at most one more began within the
    // claim's freshness (its check came just before the pause committed).
    EXPECT_EQ(delivered_since(paused + absl::Milliseconds(600)), 0);
    ASSERT_TRUE(admin_->ResumeGroup(group).ok());
    // (The group before it was drained in its own turn.)
    ASSERT_TRUE(Drained(absl::Seconds(30)));
    EXPECT_TRUE(member->Stop().ok());
    EXPECT_EQ(delivered_since(absl::InfinitePast()), 40);  // each once
    EXPECT_EQ(Count("SELECT count(DISTINCT payload) FROM acks"),
              Count("SELECT count(*) FROM acks"));
  }
  EXPECT_EQ(Acked(), 80);
}

// Cancels race members that claim and acknowledge the same items at full
// speed: every item ends acknowledged once or cancelled once (a dead
// letter "cancelled by ..."), never both, never neither, and each key's
// acknowledged items keep their order. By the CLI and the SQL function as
// the operator; the member role may not.
TEST_F(OperateTest, CancelAgainstMembersAtFullSpeedLosesAndRepeatsNothing) {
  TestRole op;
  CreateGroup("g", 4);
  Grant(op, "operator");
  const std::string op_dsn = op.Dsn(db_.name());
  constexpr int kKeys = 40, kPerKey = 50;
  // Before any member: a key cancelled through the CLI, a dry run first.
  EnqueueKeyed("g", "gone", 0, 5);
  // A look first: the key's waiting items in order, one shown whole.
  auto r = RunCli(
      {"items", "list", "g", "--key", "gone", "--json", "--dsn", op_dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("gone:", i))) << r.out;
  }
  EXPECT_LT(r.out.find("gone:0"), r.out.find("gone:4")) << r.out;
  std::string first_id;
  {
    pqxx::nontransaction tx(*conn_);
    first_id =
        tx.exec1("SELECT id::text FROM sqlgroup.items ORDER BY id LIMIT 1")[0]
            .as<std::string>();
  }
  r = RunCli({"items", "show", "g", first_id, "--dsn", op_dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "gone:0")) << r.out;
  r = RunCli(
      {"items", "cancel", "g", "--key", "gone", "--dry_run", "--dsn", op_dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "would cancel 5 item(s)")) << r.out;
  EXPECT_EQ(Dead(), 0);
  r = RunCli({"items", "cancel", "g", "--key", "gone", "--dsn", op_dsn});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "cancelled 5 item(s)")) << r.out;
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items WHERE "
                  "last_error = 'cancelled by " +
                  op.name() + "'"),
            5);
  r = RunCli({"items", "cancel", "g", "--key", "gone", "--dsn", member_dsn_});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.err, "--operator_role")) << r.err;
  // The SQL functions, as the operator: the cancelled items are dead
  // letters that say so, and one shows its payload.
  {
    pqxx::connection as_op(op_dsn);
    pqxx::nontransaction tx(as_op);
    const pqxx::result dead = tx.exec(
        "SELECT id::text, last_error FROM sqlgroup.dead_list('g', of_key => "
        "'gone')");
    ASSERT_EQ(dead.size(), 5u);
    EXPECT_EQ(dead[0][1].as<std::string>(), "cancelled by " + op.name());
    EXPECT_EQ(tx.exec_params1("SELECT convert_from(payload, 'UTF8') FROM "
                              "sqlgroup.dead_show('g', $1::uuid)",
                              first_id)[0]
                  .as<std::string>(),
              "gone:0");
  }

  for (int k = 0; k < kKeys; ++k) {
    EnqueueKeyed("g", absl::StrCat("k", k), 0, kPerKey);
  }
  auto poisoned = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::unique_ptr<Consumer>> members;
  for (int i = 0; i < 2; ++i) {
    // A millisecond in the handler: cancels meet items in flight.
    ConsumerOptions o = Options(
        "g",
        [acker = Acker(poisoned, {})](const Item& item, AckTransaction& ack) {
          absl::SleepFor(absl::Milliseconds(1));
          return acker(item, ack);
        });
    o.workers = 3;
    members.push_back(Start(o));
    ASSERT_NE(members.back(), nullptr);
  }
  // The operator cancels the first waiting items of a few keys, by id,
  // as fast as it can, and now and then a whole key, while they run.
  pqxx::connection as_op(op_dsn);
  int cancelled = 0, refused = 0, rounds = 0;
  while (Count("SELECT count(*) FROM sqlgroup.items") > 0 && rounds < 2000) {
    ++rounds;
    try {
      pqxx::work tx(as_op);
      const pqxx::result c =
          rounds % 25 == 0
              ? tx.exec_params(
                    "SELECT id FROM sqlgroup.items_cancel('g', "
                    "of_key => $1)",
                    absl::StrCat("k", rounds % kKeys))
              : tx.exec(
                    "SELECT id FROM sqlgroup.items_cancel('g', ARRAY("
                    "SELECT i.id FROM sqlgroup.items_list('g', max_rows => "
                    "40) i ORDER BY random() LIMIT 3))");
      tx.commit();
      cancelled += static_cast<int>(c.size());
    } catch (const pqxx::sql_error& e) {
      // Acknowledged between the list and the cancel: nothing changed.
      ++refused;
      EXPECT_TRUE(absl::StrContains(e.what(), "has no waiting item"))
          << e.what();
    }
  }
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  int64_t lost = 0;  // acks the fence refused: items cancelled in flight
  for (auto& m : members) {
    lost += m->stats().lost_claims;
    EXPECT_TRUE(m->Stop().ok());
  }

  const int64_t acked = Acked();
  const int64_t dead = Count(
      "SELECT count(*) FROM sqlgroup.dead_items "
      "WHERE key <> 'gone'");
  EXPECT_GT(cancelled, 0);
  EXPECT_GT(lost, 0) << "no cancel met an item in flight";
  EXPECT_EQ(dead, cancelled);
  EXPECT_EQ(acked + dead, kKeys * kPerKey)
      << "acked " << acked << ", cancelled " << dead;
  // Never both, never twice.
  EXPECT_EQ(Count("SELECT count(*) FROM acks a JOIN sqlgroup.dead_items d "
                  "ON convert_from(d.payload, 'UTF8') = a.payload"),
            0);
  EXPECT_EQ(Count("SELECT count(*) FROM (SELECT payload FROM acks GROUP BY "
                  "payload HAVING count(*) > 1) x"),
            0);
  // Each key's acknowledged items in their order.
  for (int k = 0; k < kKeys; ++k) {
    const std::vector<std::string> order = AckOrder(absl::StrCat("k", k));
    int last = -1;
    for (const std::string& payload : order) {
      const int seq = std::stoi(payload.substr(payload.find(':') + 1));
      EXPECT_GT(seq, last) << payload;
      last = seq;
    }
  }
  std::printf(
      "cancel race: %d cancelled in %d rounds (%d refused), %lld acked, "
      "%lld acks refused by the fence\n",
      cancelled, rounds, refused, static_cast<long long>(acked),
      static_cast<long long>(lost));
}

}  // namespace
}  // namespace sqlgroup
