// A group's dead-letter policies and own facts against a real PostgreSQL,
// with running members of the least-privilege member role: dead letters
// removed once they outlive the group's dead_retention (and only those),
// set and cleared through the CLI; under on_dead hold a key waits behind
// its dead letter until it is requeued or purged, the rest of the group
// going on, with a batch handler too; the group's dead letters and pauses
// reported by exactly one running member, and by another once it stops.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <atomic>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/consumer.h"
#include "support/consumer_fixture.h"
#include "support/subprocess.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using testing::RunCli;
using testing::WaitFor;

// The value of the series `name` of `group` in `registry`; nullopt when
// there is none.
std::optional<double> Value(prometheus::Registry& registry,
                            const std::string& name, const std::string& group) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == "group" && l.value == group) {
          return family.type == prometheus::MetricType::Counter
                     ? m.counter.value
                     : m.gauge.value;
        }
      }
    }
  }
  return std::nullopt;
}

class DeadLetterPoliciesTest : public testing::ConsumerFixture {
 protected:
  // A dead letter of `group` that died `ago`, as a member would write it.
  void DeadLetter(const std::string& group, const std::string& payload,
                  const std::string& ago) {
    pqxx::work tx(*conn_);
    tx.exec_params(
        "INSERT INTO sqlgroup.dead_items (group_name, id, key, payload, "
        "enqueued_at, attempts, last_error, died_at) VALUES ($1, "
        "gen_random_uuid(), NULL, $2::bytea, clock_timestamp(), 1, 'boom', "
        "clock_timestamp() - $3::interval)",
        group, payload, ago);
    tx.commit();
  }

  int64_t DeadOf(const std::string& group) {
    pqxx::nontransaction tx(*conn_);
    return tx
        .exec_params1(
            "SELECT count(*) FROM sqlgroup.dead_items WHERE group_name = $1",
            group)[0]
        .as<int64_t>();
  }

  std::string DescribeJson(const std::string& group) {
    auto r = RunCli({"group", "describe", group, "--json", "--dsn", db_.dsn()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }
};

TEST_F(DeadLetterPoliciesTest, MembersRemoveOnlyDeadLettersPastTheRetention) {
  CreateGroup("g", 2);
  CreateGroup("other", 2);
  // Set through the CLI, as an operator would.
  auto set = RunCli(
      {"group", "alter", "g", "--dead_retention", "3s", "--dsn", db_.dsn()});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_NE(DescribeJson("g").find("\"dead_retention_seconds\":3"),
            std::string::npos)
      << DescribeJson("g");
  DeadLetter("g", "old", "1 hour");
  DeadLetter("other", "other-old", "1 hour");  // no retention: kept

  prometheus::Registry registry;
  ConsumerOptions o = Options("g", [](const Item& item, AckTransaction&) {
    return item.payload == "poison" ? DeadLetterVerdict("refused")
                                    : absl::OkStatus();
  });
  o.metrics = &registry;
  o.lag_interval = absl::Milliseconds(100);
  auto c = Start(o);
  ASSERT_NE(c, nullptr);
  // The old one goes within a measurement or two.
  ASSERT_TRUE(WaitFor([&] { return DeadOf("g") == 0; }, absl::Seconds(10)));
  {
    pqxx::work tx(*conn_);
    tx.exec("SELECT sqlgroup.enqueue('g', 'k', 'poison'::bytea)");
    tx.commit();
  }
  // A fresh one stays about as long as the retention says, then goes.
  ASSERT_TRUE(WaitFor([&] { return DeadOf("g") == 1; }, absl::Seconds(10)));
  const absl::Time died = absl::Now();
  ASSERT_TRUE(WaitFor(
      [&] { return Value(registry, "sqlgroup_dead_items", "g") == 1.0; },
      absl::Seconds(5)));
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(DeadOf("g"), 1) << "removed before the retention";
  ASSERT_TRUE(WaitFor([&] { return DeadOf("g") == 0; }, absl::Seconds(10)));
  EXPECT_GE(absl::Now() - died, absl::Seconds(2));
  EXPECT_TRUE(WaitFor(
      [&] {
        return Value(registry, "sqlgroup_dead_items_expired_total", "g") ==
                   2.0 &&
               Value(registry, "sqlgroup_dead_items", "g") == 0.0;
      },
      absl::Seconds(5)));
  EXPECT_EQ(DeadOf("other"), 1);

  // Cleared: kept again.
  auto clear = RunCli(
      {"group", "alter", "g", "--dead_retention", "0", "--dsn", db_.dsn()});
  ASSERT_EQ(clear.exit_code, 0) << clear.err;
  EXPECT_NE(DescribeJson("g").find("\"dead_retention_seconds\":null"),
            std::string::npos);
  DeadLetter("g", "kept", "1 hour");
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(DeadOf("g"), 1);
  EXPECT_TRUE(c->Stop().ok());
}

// Holds as the database keeps them, without members: two transactions
// that remove a held key's last dead letters at once lift its hold (the
// second to commit sees the first's removal); a cancelled item holds
// nothing, and does not keep a hold on once the key's real dead letter is
// requeued.
TEST_F(DeadLetterPoliciesTest, HoldsLiftWhenTheLastRealDeadLetterGoes) {
  GroupConfig config{.name = "h", .parts = 2};
  config.on_dead = OnDead::kHold;
  ASSERT_TRUE(admin_->CreateGroup(config).ok());
  auto kill = [&](const std::string& payload) {  // as a member dead-letters
    pqxx::work tx(*conn_);
    const std::string id =
        tx.exec_params1("SELECT sqlgroup.enqueue('h', 'k', $1::bytea)",
                        payload)[0]
            .as<std::string>();
    tx.exec_params(
        "WITH gone AS (DELETE FROM sqlgroup.items WHERE id = $1::uuid "
        "RETURNING *) INSERT INTO sqlgroup.dead_items (group_name, id, key, "
        "payload, enqueued_at, attempts, last_error) SELECT group_name, id, "
        "key, payload, enqueued_at, 1, 'boom' FROM gone",
        id);
    tx.commit();
    return id;
  };
  auto holds = [&] {
    return Count(
        "SELECT count(*) FROM sqlgroup.pauses WHERE paused_by = "
        "'on_dead hold'");
  };
  const std::string a = kill("a"), b = kill("b");
  ASSERT_EQ(holds(), 1);
  // Two purges at once, each of one of the two.
  pqxx::connection first_conn(db_.dsn());
  pqxx::work first(first_conn);
  first.exec_params("SELECT * FROM sqlgroup.dead_purge('h', ARRAY[$1]::uuid[])",
                    a);
  std::thread second([&] {
    pqxx::connection conn(db_.dsn());
    pqxx::work tx(conn);
    tx.exec_params("SELECT * FROM sqlgroup.dead_purge('h', ARRAY[$1]::uuid[])",
                   b);
    tx.commit();
  });
  absl::SleepFor(absl::Milliseconds(300));  // the second waits for the hold
  first.commit();
  second.join();
  EXPECT_EQ(DeadOf("h"), 0);
  EXPECT_EQ(holds(), 0) << "a hold left behind no dead letter";

  // A cancelled item of the key, then a real death: requeuing the real one
  // lifts the hold though the cancelled one stays.
  {
    pqxx::work tx(*conn_);
    tx.exec("SELECT sqlgroup.enqueue('h', 'k', 'c'::bytea)");
    tx.exec("SELECT * FROM sqlgroup.items_cancel('h', of_key => 'k')");
    tx.commit();
  }
  EXPECT_EQ(holds(), 0) << "a cancel held its key";
  const std::string d = kill("d");
  ASSERT_EQ(holds(), 1);
  ASSERT_TRUE(admin_->RequeueDead("h", {.ids = {d}}).ok());
  EXPECT_EQ(holds(), 0);
  EXPECT_EQ(DeadOf("h"), 1);  // the cancelled one
}

// The member that reports the group expires dead letters without a
// metrics registry too; with a role that may not call dead_expire it
// still reports the group's facts.
TEST_F(DeadLetterPoliciesTest, ExpiryNeedsNoMetricsAndFactsNeedNoExpiry) {
  CreateGroup("g", 2);
  ASSERT_TRUE(admin_->AlterDeadRetention("g", absl::Seconds(1)).ok());
  DeadLetter("g", "old", "1 hour");
  {
    ConsumerOptions o = Options("g", Recorder("g"));
    ASSERT_EQ(o.metrics, nullptr);
    auto c = Start(o);
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(WaitFor([&] { return DeadOf("g") == 0; }, absl::Seconds(15)));
    EXPECT_TRUE(c->Stop().ok());
  }
  DeadLetter("g", "old", "1 hour");
  {
    pqxx::work tx(*conn_);
    tx.exec(
        absl::StrCat("REVOKE EXECUTE ON FUNCTION sqlgroup.dead_expire("
                     "text, integer) FROM ",
                     testing::kMemberRole));
    tx.commit();
  }
  prometheus::Registry registry;
  ConsumerOptions o = Options("g", Recorder("g"));
  o.metrics = &registry;
  o.lag_interval = absl::Milliseconds(100);
  auto c = Start(o);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(WaitFor(
      [&] { return Value(registry, "sqlgroup_dead_items", "g") == 1.0; },
      absl::Seconds(10)));
  EXPECT_EQ(DeadOf("g"), 1);  // not removed: the role may not
  EXPECT_TRUE(c->Stop().ok());
}

TEST_F(DeadLetterPoliciesTest, BadRetentionsAreRefusedAndChangeNothing) {
  CreateGroup("g", 2);
  auto r = RunCli({"group", "alter", "g", "--dead_retention", "500ms", "--ttl",
                   "4s", "--dsn", db_.dsn()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--dead_retention must be 0"), std::string::npos)
      << r.err;
  auto g = admin_->GetGroup("g");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->session_ttl, absl::Seconds(2));  // nothing changed
  EXPECT_EQ(g->dead_retention, absl::ZeroDuration());
  EXPECT_TRUE(
      absl::IsNotFound(admin_->AlterDeadRetention("nope", absl::Hours(1))));
  EXPECT_TRUE(absl::IsInvalidArgument(
      admin_->AlterDeadRetention("g", -absl::Seconds(1))));
  GroupConfig config{.name = "h", .parts = 2};
  config.dead_retention = absl::Hours(24);
  ASSERT_TRUE(admin_->CreateGroup(config).ok());
  auto h = admin_->GetGroup("h");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->dead_retention, absl::Hours(24));
}

// Three members, the group's facts from exactly one of them; when it
// stops, from one of the others, and its series are gone.
TEST_F(DeadLetterPoliciesTest, OneRunningMemberReportsTheGroupsFacts) {
  CreateGroup("g", 2);
  DeadLetter("g", "a", "1 minute");
  DeadLetter("g", "b", "2 minutes");
  {
    pqxx::work tx(*conn_);
    tx.exec("SELECT sqlgroup.pause('g')");
    tx.exec("SELECT sqlgroup.pause('g', 'k1')");
    tx.exec("SELECT sqlgroup.pause('g', 'k2')");
    tx.commit();
  }
  constexpr int kMembers = 3;
  std::vector<std::unique_ptr<prometheus::Registry>> registries;
  std::vector<std::unique_ptr<Consumer>> members;
  for (int i = 0; i < kMembers; ++i) {
    registries.push_back(std::make_unique<prometheus::Registry>());
    ConsumerOptions o = Options("g", Recorder("g"));
    o.metrics = registries.back().get();
    o.lag_interval = absl::Milliseconds(100);
    members.push_back(Start(o));
    ASSERT_NE(members.back(), nullptr);
  }
  // Which members report: exactly one, with the group's numbers.
  auto reporters = [&] {
    std::vector<int> out;
    for (int i = 0; i < kMembers; ++i) {
      if (members[i] && Value(*registries[i], "sqlgroup_dead_items", "g")) {
        out.push_back(i);
      }
    }
    return out;
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        // Read once: which members report may change between two reads.
        const std::vector<int> now = reporters();
        return now.size() == 1 &&
               Value(*registries[now[0]], "sqlgroup_paused_keys", "g") == 2.0;
      },
      absl::Seconds(15)));
  // Stable: still one after more measurements.
  absl::SleepFor(absl::Milliseconds(500));
  const std::vector<int> settled = reporters();
  ASSERT_EQ(settled.size(), 1u);
  const int first = settled[0];
  prometheus::Registry& r = *registries[first];
  EXPECT_EQ(Value(r, "sqlgroup_dead_items", "g"), 2.0);
  EXPECT_EQ(Value(r, "sqlgroup_group_paused", "g"), 1.0);
  const std::optional<double> age =
      Value(r, "sqlgroup_oldest_dead_item_age_seconds", "g");
  ASSERT_TRUE(age.has_value());
  EXPECT_GE(*age, 120);
  EXPECT_LT(*age, 180);

  // It stops: another takes over, and its series go.
  EXPECT_TRUE(members[first]->Stop().ok());
  members[first].reset();
  EXPECT_FALSE(Value(r, "sqlgroup_dead_items", "g").has_value());
  {
    pqxx::work tx(*conn_);
    tx.exec("SELECT sqlgroup.resume('g')");
    tx.commit();
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::vector<int> now = reporters();
        return now.size() == 1 &&
               Value(*registries[now[0]], "sqlgroup_group_paused", "g") == 0.0;
      },
      absl::Seconds(15)));
  for (auto& m : members) {
    if (m) {
      EXPECT_TRUE(m->Stop().ok());
    }
  }
}

class OnDeadTest : public DeadLetterPoliciesTest,
                   public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    DeadLetterPoliciesTest::SetUp();
    CreateAcksTable();
  }
  void Enqueue(const std::string& key, int from, int to) {
    std::vector<std::string> payloads;
    for (int i = from; i < to; ++i)
      payloads.push_back(absl::StrCat(key, ":", i));
    EnqueuePayloads(key, payloads);
  }
  void EnqueuePayloads(const std::string& key,
                       const std::vector<std::string>& payloads) {
    pqxx::work tx(*conn_);
    for (const std::string& payload : payloads) {
      tx.exec_params("SELECT sqlgroup.enqueue('g', $1, $2::bytea)", key,
                     payload);
    }
    tx.commit();
  }
  int64_t Waiting(const std::string& key) {
    pqxx::nontransaction tx(*conn_);
    return tx
        .exec_params1("SELECT count(*) FROM sqlgroup.items WHERE key = $1",
                      key)[0]
        .as<int64_t>();
  }
  // Dead-letters payloads in `poison` while `*poisoned`; records the rest.
  // Batched (GetParam()): a batch handler whose batch fails as a whole
  // when it holds a poison item, so the item dies in the retry item by
  // item, with the rest of its key in the same batch.
  ConsumerOptions Handling(std::shared_ptr<std::atomic<bool>> poisoned,
                           std::set<std::string> poison) {
    auto one = [poisoned, poison](const Item& item,
                                  AckTransaction& ack) -> absl::Status {
      if (*poisoned && poison.count(item.payload)) {
        return DeadLetterVerdict("poison");
      }
      ack.work().exec_params("INSERT INTO acks (payload) VALUES ($1)",
                             item.payload);
      return absl::OkStatus();
    };
    ConsumerOptions o = Options("g", one);
    if (GetParam()) {
      o.handler = nullptr;
      o.batch_handler = [one, poisoned, poison](const std::vector<Item>& items,
                                                AckTransaction& ack) {
        for (const Item& item : items) {
          if (items.size() > 1 && *poisoned && poison.count(item.payload)) {
            return absl::InternalError("a poison item in the batch");
          }
        }
        for (const Item& item : items) {
          if (absl::Status s = one(item, ack); !s.ok()) return s;
        }
        return absl::OkStatus();
      };
      o.claim_batch = 16;
    }
    return o;
  }
};

TEST_P(OnDeadTest, HoldKeepsTheKeyBehindItsDeadLetterUntilRequeuedOrPurged) {
  GroupConfig config{.name = "g", .parts = 2};
  config.on_dead = OnDead::kHold;
  config.session_ttl = absl::Seconds(2);
  config.heartbeat_interval = absl::Milliseconds(400);
  ASSERT_TRUE(admin_->CreateGroup(config).ok());
  auto poisoned = std::make_shared<std::atomic<bool>>(true);
  Enqueue("k", 0, 6);
  Enqueue("j", 0, 4);
  auto c = Start(Handling(poisoned, {"k:2", "k:4"}));
  ASSERT_NE(c, nullptr);
  // k:0 and k:1 go, k:2 dies and holds k; the other key goes on.
  ASSERT_TRUE(WaitFor(
      [&] {
        return AckOrder("j").size() == 4 &&
               Count("SELECT count(*) FROM sqlgroup.dead_items") == 1;
      },
      absl::Seconds(15)));
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(AckOrder("k"), (std::vector<std::string>{"k:0", "k:1"}));
  EXPECT_EQ(Waiting("k"), 3);
  auto d = admin_->DescribeGroup("g");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->pauses.size(), 1u);
  EXPECT_EQ(d->pauses[0].key, "k");
  EXPECT_EQ(d->pauses[0].paused_by, "on_dead hold");
  EXPECT_EQ(d->config.on_dead, OnDead::kHold);

  // Requeued (the handler mended): the key goes on from its dead letter.
  *poisoned = false;
  auto requeued = admin_->RequeueDead("g", {.all = true});
  ASSERT_TRUE(requeued.ok()) << requeued.status();
  ASSERT_TRUE(WaitFor([&] { return Waiting("k") == 0; }, absl::Seconds(10)));
  EXPECT_EQ(AckOrder("k"), (std::vector<std::string>{"k:0", "k:1", "k:2", "k:3",
                                                     "k:4", "k:5"}));

  // Dies again, purged: the key goes on without it.
  *poisoned = true;
  EnqueuePayloads("k", {"k:4", "k:7", "k:8"});  // poison again first
  ASSERT_TRUE(WaitFor(
      [&] { return Count("SELECT count(*) FROM sqlgroup.dead_items") == 1; },
      absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(Waiting("k"), 2);
  ASSERT_TRUE(admin_->PurgeDead("g", {.all = true}).ok());
  ASSERT_TRUE(WaitFor([&] { return Waiting("k") == 0; }, absl::Seconds(10)));
  const std::vector<std::string> order = AckOrder("k");
  EXPECT_EQ(std::vector<std::string>(order.end() - 2, order.end()),
            (std::vector<std::string>{"k:7", "k:8"}));
  EXPECT_TRUE(c->Stop().ok());
}

TEST_P(OnDeadTest, ReleaseLetsTheKeyGoOnAndLiftsHolds) {
  CreateGroup("g", 2);
  auto poisoned = std::make_shared<std::atomic<bool>>(true);
  Enqueue("k", 0, 4);
  auto c = Start(Handling(poisoned, {"k:1"}));
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Waiting("k") == 0; }, absl::Seconds(10)));
  EXPECT_EQ(AckOrder("k"), (std::vector<std::string>{"k:0", "k:2", "k:3"}));
  // Hold, a key held; back to release: the hold is lifted at once.
  ASSERT_TRUE(admin_->AlterOnDead("g", OnDead::kHold).ok());
  EnqueuePayloads("h", {"k:1", "h:1", "h:2"});  // poison first
  ASSERT_TRUE(WaitFor(
      [&] { return Count("SELECT count(*) FROM sqlgroup.pauses") == 1; },
      absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(Waiting("h"), 2);
  auto r = RunCli(
      {"group", "alter", "g", "--on_dead", "release", "--dsn", db_.dsn()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(WaitFor([&] { return Waiting("h") == 0; }, absl::Seconds(10)));
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.pauses"), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 2);
  EXPECT_TRUE(c->Stop().ok());

  // Refusals: hold under ordering none, a bad value.
  GroupConfig none{.name = "n", .parts = 2, .ordering = Ordering::kNone};
  none.on_dead = OnDead::kHold;
  EXPECT_TRUE(absl::IsInvalidArgument(admin_->CreateGroup(none)));
  r = RunCli({"group", "alter", "g", "--on_dead", "keep", "--dsn", db_.dsn()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--on_dead=keep: 'keep' is not an on_dead policy"),
            std::string::npos)
      << r.err;
}

INSTANTIATE_TEST_SUITE_P(SingleAndBatch, OnDeadTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Batch" : "Single";
                         });

}  // namespace
}  // namespace sqlgroup
