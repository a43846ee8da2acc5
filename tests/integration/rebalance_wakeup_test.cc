// How members learn of changes without polling for them: a drop wakes the
// member that takes the part (its own NOTIFY channel), and a watched
// heartbeat (at least one a TTL) shows a join that announced nothing.
// Polls are set far longer than the waits here, so a test passes only
// through the wake-up it is about.
#include <gtest/gtest.h>

#include <atomic>
#include <pqxx/pqxx>

#include "absl/cleanup/cleanup.h"
#include "sqlgroup/assignor.h"
#include "support/consumer_fixture.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using testing::WaitFor;

class RebalanceWakeupTest : public testing::ConsumerFixture {
 protected:
  // A member that re-reads the membership on its own only every 60 s
  // (every 6 s while it waits for parts).
  ConsumerOptions Patient(const std::string& group) {
    ConsumerOptions o = Options(group, Recorder(group));
    o.rebalance_poll = absl::Seconds(30);
    o.rebalance_poll_listening = absl::Seconds(60);
    return o;
  }
};

TEST_F(RebalanceWakeupTest, ADropWakesTheMemberWaitingForThePart) {
  CreateGroup("g", 8);
  // One worker per part, so that 8 workers hold all 8 parts: under
  // ordering 'key' the workers would share the keys of one part instead.
  {
    pqxx::work tx(*conn_);
    tx.exec("UPDATE sqlgroup.groups SET ordering = 'none' WHERE name = 'g'");
    tx.commit();
  }
  // a works on every part at once and holds each item until released, so
  // none of its parts can be dropped before then (drain timeout 30 s).
  std::atomic<bool> hold{true};
  std::atomic<int> in_flight{0};
  ConsumerOptions holder = Patient("g");
  holder.workers = 8;
  holder.max_connections = 9;  // every worker on a connection of its own
  holder.drain_timeout = absl::Seconds(30);
  holder.handler = [&](const Item&, AckTransaction&) {
    ++in_flight;
    while (hold) absl::SleepFor(absl::Milliseconds(5));
    return absl::OkStatus();
  };
  auto a = Start(std::move(holder));
  // A failed assertion below must not leave a's handlers holding forever.
  absl::Cleanup release = [&] { hold = false; };
  ASSERT_TRUE(Settles("g", 8, {a.get()}));
  Produce("g", 400);  // 50 items in each part
  ASSERT_TRUE(WaitFor([&] { return in_flight == 8; }, absl::Seconds(10)));
  // b joins and reads at once: every part it wants is still a's.
  auto b = Start(Patient("g"));
  absl::SleepFor(absl::Seconds(1));
  ASSERT_TRUE(b->owned_parts().empty());
  // a finishes its items and drops b's parts; only that drop's NOTIFY can
  // bring b back before its own re-read, 6 s after the last.
  hold = false;
  EXPECT_TRUE(Settles("g", 8, {a.get(), b.get()}, absl::Seconds(3)));
}

TEST_F(RebalanceWakeupTest, AJoinWithoutNotifyShowsInAWatchedHeartbeat) {
  CreateGroup("g", 8);
  auto a = Start(Patient("g"));
  ASSERT_TRUE(Settles("g", 8, {a.get()}));
  // b neither LISTENs nor NOTIFYs, so a hears nothing of it; a's watched
  // heartbeats (alone: one a TTL, 2 s) fingerprint the live members.
  ConsumerOptions quiet = Options("g", Recorder("g"));
  quiet.use_notify = false;
  auto b = Start(std::move(quiet));
  // Within a watched heartbeat and a rebalance, with room for a loaded
  // machine; a's own re-read is 60 s away.
  EXPECT_TRUE(Settles("g", 8, {a.get(), b.get()}, absl::Seconds(8)));
}

TEST_F(RebalanceWakeupTest, ALeaveAndAJoinTogetherShowInAWatchedHeartbeat) {
  CreateGroup("g", 8);
  auto a = Start(Patient("g"));
  ASSERT_TRUE(Settles("g", 8, {a.get()}));
  // Sessions of no process, alive for an hour, written without a NOTIFY:
  // first one that sorts before every other id...
  const std::string first = "00000000-0000-4000-8000-000000000000";
  const std::string last = "ffffffff-ffff-4fff-bfff-ffffffffffff";
  auto insert = [&](pqxx::work& tx, const std::string& id) {
    tx.exec_params(
        "INSERT INTO sqlgroup.sessions (id, group_name, heartbeated_at, "
        "member_schema) VALUES ($1::uuid, 'g', clock_timestamp() + "
        "interval '1 hour', (SELECT max(version) FROM "
        "sqlgroup.schema_migrations))",
        id);
  };
  {
    pqxx::work tx(*conn_);
    insert(tx, first);
    tx.commit();
  }
  const auto targets = [&](const std::string& other) {
    return LexicalRangeAssignor()
        .Assign({a->session_id(), other}, 8)
        .parts_of(a->session_id());
  };
  ASSERT_TRUE(WaitFor([&] { return a->owned_parts() == targets(first); },
                      absl::Seconds(8)));
  // ...then, in one transaction, it leaves and one that sorts after every
  // other id joins: the number of members stays the same.
  {
    pqxx::work tx(*conn_);
    tx.exec_params("DELETE FROM sqlgroup.sessions WHERE id = $1::uuid", first);
    insert(tx, last);
    tx.commit();
  }
  EXPECT_TRUE(WaitFor([&] { return a->owned_parts() == targets(last); },
                      absl::Seconds(8)));
}

}  // namespace
}  // namespace sqlgroup
