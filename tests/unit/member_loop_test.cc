// The member loop on its own thread against an in-memory store and a fake
// control channel: joining, losing the session, a part-count change, an
// unknown assignor and a handover that waits for a busy part, with no
// database.
#include "member/member_loop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "spdlog/sinks/null_sink.h"
#include "spdlog/spdlog.h"
#include "store/notifications.h"
#include "support/fake_control_channel.h"
#include "support/fake_membership_store.h"

namespace sqlgroup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Waits up to 10 s for `done`.
template <typename F>
bool WaitFor(F done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return done();
}

class MemberLoopTest : public ::testing::Test {
 protected:
  MemberLoopTest() {
    store_.settings.ttl = absl::Seconds(2);
    store_.settings.heartbeat = absl::Milliseconds(20);
  }
  // The loop owns its store, which lives as long as the loop: the test
  // keeps a reference.
  ~MemberLoopTest() override { Stop(); }

  // `schema_check`: how often the loop reads the schema without a notice
  // (an hour: only notices and joins make it read).
  void Start(internal::SchemaState schema = {kSchemaVersion,
                                             kSchemaVersion - 1},
             absl::Duration schema_check = absl::Hours(1)) {
    MemberConfig config;
    config.group = "g";
    config.schema = schema;
    config.schema_check = schema_check;
    config.rebalance_poll = absl::Milliseconds(20);
    config.rebalance_poll_listening = absl::Milliseconds(20);
    config.rebalance = {.group = "g", .drain_timeout = absl::Hours(1)};
    config.rebalance.cut_off = [this](const std::string&,
                                      const std::vector<int>& parts) {
      cut_offs_ += static_cast<int>(parts.size());
    };
    config.channel.budget = &budget_;
    loop_ = std::make_unique<MemberLoop>(
        config, store_.settings, scheduler_, metrics_,
        spdlog::null_logger_mt("member_loop_test" + std::to_string(++n_)),
        [this](const NotificationRouter& router, const Wakeup& stop) {
          router_ = &router;
          auto channel = std::make_unique<testing::FakeControlChannel>(stop);
          channel_ = channel.get();
          MemberSeams seams;
          seams.channel = std::move(channel);
          seams.store = std::move(owned_store_);
          return seams;
        });
    thread_ = std::thread([this] { loop_->Run(); });
  }
  // What the store's ReadSchema answers from now on; the reads so far.
  int SetSchema(internal::SchemaState schema) {
    std::lock_guard<std::mutex> lock(store_.mu);
    store_.schema = schema;
    return store_.schema_reads;
  }
  void Stop() {
    if (!thread_.joinable()) return;
    loop_->RequestStop();
    thread_.join();
  }
  std::vector<int> Owned() const { return loop_->owned_parts(); }
  bool Owns(std::vector<int> parts) const { return Owned() == parts; }

  static inline int n_ = 0;
  std::unique_ptr<testing::FakeMembershipStore> owned_store_ =
      std::make_unique<testing::FakeMembershipStore>(4);
  testing::FakeMembershipStore& store_ = *owned_store_;
  PartScheduler scheduler_{absl::Milliseconds(10), absl::ZeroDuration()};
  MemberMetrics metrics_{nullptr, "g", "test"};
  ConnectionBudget budget_{10};
  testing::FakeControlChannel* channel_ = nullptr;
  const NotificationRouter* router_ = nullptr;  // the loop's
  std::atomic<int> cut_offs_{0};
  std::unique_ptr<MemberLoop> loop_;
  std::thread thread_;
};

TEST_F(MemberLoopTest, JoinsTakesEveryPartAndLeavesOnStop) {
  Start();
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  EXPECT_EQ(loop_->phase(), MemberLoop::Phase::kActive);
  EXPECT_EQ(loop_->session_id(), "s1");
  Stop();
  EXPECT_EQ(loop_->phase(), MemberLoop::Phase::kLeft);
  std::lock_guard<std::mutex> lock(store_.mu);
  EXPECT_THAT(store_.live, IsEmpty());  // a graceful leave deletes it
  EXPECT_THAT(store_.owners, IsEmpty());
}

TEST_F(MemberLoopTest, ALostSessionVoidsItsPartsAndJoinsAgain) {
  Start();
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  {
    // Reaped by another member: its parts went with it.
    std::lock_guard<std::mutex> lock(store_.mu);
    store_.live.erase("s1");
    store_.owners.clear();
  }
  ASSERT_TRUE(WaitFor([&] { return loop_->session_id() == "s2"; }));
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  std::lock_guard<std::mutex> lock(store_.mu);
  EXPECT_EQ(store_.owners.at(0).session, "s2");
}

TEST_F(MemberLoopTest, AGroupWhosePartCountChangesIsRunUnderTheNewCount) {
  Start();
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  {
    std::lock_guard<std::mutex> lock(store_.mu);
    store_.settings.parts = 6;  // read with the next heartbeat
  }
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3, 4, 5}); }));
  std::lock_guard<std::mutex> lock(store_.mu);
  EXPECT_THAT(store_.takes_under, ElementsAre(4, 6));
}

TEST_F(MemberLoopTest, AnUnknownAssignorMakesTheMemberLeaveAndStop) {
  store_.settings.assignor = "from-the-future";
  Start();
  ASSERT_TRUE(
      WaitFor([&] { return loop_->phase() == MemberLoop::Phase::kFailed; }));
  EXPECT_TRUE(absl::IsFailedPrecondition(loop_->fatal()));
  EXPECT_THAT(
      std::string(loop_->fatal().message()),
      HasSubstr("'from-the-future', which this sqlgroup does not know"));
  EXPECT_THAT(Owned(), IsEmpty());
  thread_.join();  // the loop ended on its own
  std::lock_guard<std::mutex> lock(store_.mu);
  EXPECT_THAT(store_.live, IsEmpty());  // it left, so its parts move at once
}

TEST_F(MemberLoopTest, AHandoverWaitsForTheCallOnABusyPart) {
  Start();
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  // A worker has part 3's claim.
  PartTask task;
  ASSERT_TRUE(WaitFor([&] {
    task = scheduler_.Next(absl::Now() + absl::Milliseconds(5));
    if (task.kind == PartTask::Kind::kProbe) scheduler_.FinishProbe({3});
    return task.kind == PartTask::Kind::kClaim;
  }));
  ASSERT_EQ(task.ref.part, 3);
  {
    std::lock_guard<std::mutex> lock(store_.mu);
    store_.live.insert("s9");  // a second member joins: 2 and 3 move
  }
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 3}); }));
  absl::SleepFor(absl::Milliseconds(100));  // many rounds of the loop
  EXPECT_THAT(Owned(), ElementsAre(0, 1, 3));
  {
    std::lock_guard<std::mutex> lock(store_.mu);
    EXPECT_THAT(store_.revoking, ElementsAre(3));
  }
  scheduler_.FinishClaim(3, task.ref.epoch, false, task.cursor);
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1}); }));
  std::lock_guard<std::mutex> lock(store_.mu);
  EXPECT_EQ(store_.owners.count(3), 0u);
}

TEST_F(MemberLoopTest, ALostSessionJoinsAgainOnlyOnceItsCallsReturned) {
  Start();
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  PartTask task;
  ASSERT_TRUE(WaitFor([&] {
    task = scheduler_.Next(absl::Now() + absl::Milliseconds(5));
    if (task.kind == PartTask::Kind::kProbe) scheduler_.FinishProbe({1});
    return task.kind == PartTask::Kind::kClaim;
  }));
  {
    std::lock_guard<std::mutex> lock(store_.mu);
    store_.live.erase("s1");  // reaped while a call runs on part 1
    store_.owners.clear();
  }
  ASSERT_TRUE(WaitFor([&] { return cut_offs_ > 0; }));
  // The cut call has not returned: no new session yet.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(loop_->phase(), MemberLoop::Phase::kJoining);
  {
    std::lock_guard<std::mutex> lock(store_.mu);
    EXPECT_EQ(store_.registered, 1);
  }
  scheduler_.FinishClaim(1, task.ref.epoch, false, task.cursor);
  ASSERT_TRUE(WaitFor([&] { return loop_->session_id() == "s2"; }));
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
}

TEST_F(MemberLoopTest, ADatabaseOutageLongerThanTheTtlLosesTheSession) {
  Start();
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  channel_->down = true;
  // No heartbeat gets through for a TTL (2 s): the parts are void.
  ASSERT_TRUE(WaitFor([&] { return Owned().empty(); }));
  EXPECT_EQ(loop_->phase(), MemberLoop::Phase::kJoining);
  {
    std::lock_guard<std::mutex> lock(store_.mu);
    store_.live.erase("s1");  // expired meanwhile, and reaped
    store_.owners.clear();
  }
  channel_->down = false;
  ASSERT_TRUE(WaitFor([&] { return loop_->session_id() == "s2"; }));
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
}

// A member records its version when it registers, on a schema that has
// the columns (14 on).
TEST_F(MemberLoopTest, RegistersWithItsVersionOnASchemaThatRecordsIt) {
  Start();
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  std::lock_guard<std::mutex> lock(store_.mu);
  ASSERT_EQ(store_.registered_infos.size(), 1u);
  EXPECT_TRUE(store_.registered_infos[0].record_version);
}

// Joined on schema 13 (no columns), it records its version once `migrate`
// says the schema is 14: `migrate` waits for that before it weighs the
// members against the next migration.
TEST_F(MemberLoopTest, RecordsItsVersionWhenTheSchemaCanHoldIt) {
  SetSchema({13, 13});
  Start({13, 13});
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  {
    std::lock_guard<std::mutex> lock(store_.mu);
    EXPECT_FALSE(store_.registered_infos.at(0).record_version);
    EXPECT_THAT(store_.versions_recorded, IsEmpty());
    store_.schema = {14, 13};
  }
  router_->Route(store::SchemaChanged(14));
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(store_.mu);
    return store_.versions_recorded.count("s1") == 1;
  }));
  EXPECT_EQ(loop_->phase(), MemberLoop::Phase::kActive);
  EXPECT_THAT(Owned(), ElementsAre(0, 1, 2, 3));
}

// A schema that no longer accepts this binary (a forced migration, or the
// binary rolled back): the member takes no more items and stops, saying
// both versions.
TEST_F(MemberLoopTest, StopsWhenTheSchemaNoLongerAcceptsIt) {
  Start();
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  SetSchema({kSchemaVersion + 1, kSchemaVersion + 1});
  router_->Route(store::SchemaChanged(kSchemaVersion + 1));
  ASSERT_TRUE(
      WaitFor([&] { return loop_->phase() == MemberLoop::Phase::kFailed; }));
  EXPECT_EQ(loop_->fatal().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(loop_->fatal().message(),
              HasSubstr("only members that know schema " +
                        std::to_string(kSchemaVersion + 1)));
  EXPECT_THAT(loop_->fatal().message(), HasSubstr("takes no more items"));
  // No worker gets another task.
  EXPECT_EQ(scheduler_.Next(absl::Now()).kind, PartTask::Kind::kStop);
}

// A newer schema that still accepts it (an expand migration): it runs on.
TEST_F(MemberLoopTest, RunsOnWhenANewerSchemaAcceptsIt) {
  Start();
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  const int reads = SetSchema({kSchemaVersion + 1, kSchemaVersion});
  router_->Route(store::SchemaChanged(kSchemaVersion + 1));
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(store_.mu);
    return store_.schema_reads > reads;
  }));
  EXPECT_EQ(loop_->phase(), MemberLoop::Phase::kActive);
  EXPECT_THAT(Owned(), ElementsAre(0, 1, 2, 3));
}

// Registering, it meets the schema's own fence (a session of a member that
// knows too old a schema is refused by the database): it stops.
TEST_F(MemberLoopTest, StopsWhenTheDatabaseRefusesItsSession) {
  {
    std::lock_guard<std::mutex> lock(store_.mu);
    store_.fail_register = absl::FailedPreconditionError(
        "register session: the database's sqlgroup schema accepts only "
        "members that know schema 99 or newer");
  }
  Start();
  ASSERT_TRUE(
      WaitFor([&] { return loop_->phase() == MemberLoop::Phase::kFailed; }));
  EXPECT_THAT(loop_->fatal().message(), HasSubstr("schema 99"));
  EXPECT_THAT(Owned(), IsEmpty());
}

// Without a notice (no LISTEN, or one missed while reconnecting), the
// member still finds the schema changed: it reads it every few seconds.
TEST_F(MemberLoopTest, FindsAChangedSchemaWithoutANotice) {
  Start({kSchemaVersion, kSchemaVersion - 1}, absl::Milliseconds(20));
  ASSERT_TRUE(WaitFor([&] { return Owns({0, 1, 2, 3}); }));
  SetSchema({kSchemaVersion + 1, kSchemaVersion + 1});
  ASSERT_TRUE(
      WaitFor([&] { return loop_->phase() == MemberLoop::Phase::kFailed; }));
  EXPECT_THAT(loop_->fatal().message(), HasSubstr("takes no more items"));
}

}  // namespace
}  // namespace sqlgroup
