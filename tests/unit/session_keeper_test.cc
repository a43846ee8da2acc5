// The SessionKeeper against an in-memory store: when heartbeats are due and
// watched, what a lost session and a failure look like, when to reap, and
// when to give up waiting for a borrowed control connection.
#include "member/session_keeper.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "spdlog/sinks/null_sink.h"
#include "spdlog/spdlog.h"
#include "support/fake_membership_store.h"

namespace sqlgroup {
namespace {

// A store whose heartbeats fail, or report an expired other member, on
// request.
class BeatStore : public testing::FakeMembershipStore {
 public:
  BeatStore() : FakeMembershipStore(4) {}
  absl::StatusOr<std::optional<store::Beat>> Heartbeat(
      const std::string& session, bool watch) override {
    watched.push_back(watch);
    if (!fail.ok()) return fail;
    auto beat = FakeMembershipStore::Heartbeat(session, watch);
    if (beat.ok() && beat->has_value() && watch) {
      (*beat)->next_expiry = next_expiry;
    }
    return beat;
  }
  absl::StatusOr<std::vector<std::string>> ReapExpired(
      const std::string&, bool, absl::Time deadline) override {
    reap_deadlines.push_back(deadline);
    return std::vector<std::string>{"gone"};
  }
  absl::Status fail;
  absl::Duration next_expiry = absl::InfiniteDuration();
  std::vector<bool> watched;
  std::vector<absl::Time> reap_deadlines;
};

class SessionKeeperTest : public ::testing::Test {
 protected:
  SessionKeeperTest() {
    settings_.parts = 4;
    settings_.ttl = absl::Seconds(1);
    settings_.heartbeat = absl::Milliseconds(20);
    store_.settings = settings_;
    store_.live = {"s1"};
    keeper_.Started("s1", settings_);
  }

  // Sleeps until the next heartbeat is due (then it is a watched one).
  void UntilDue() {
    absl::SleepFor(keeper_.next_heartbeat() - absl::Now() +
                   absl::Milliseconds(1));
  }

  store::GroupSettings settings_;
  BeatStore store_;
  MemberMetrics metrics_{nullptr, "g", "test"};
  SessionKeeper keeper_{
      {.group = "g"},
      store_,
      metrics_,
      spdlog::null_logger_mt("session_keeper_test" + std::to_string(++n_))};
  static inline int n_ = 0;
};

TEST_F(SessionKeeperTest, TheFirstHeartbeatIsDueAnIntervalAfterTheJoin) {
  const absl::Duration due = keeper_.next_heartbeat() - absl::Now();
  EXPECT_LE(due, absl::Milliseconds(20));
  EXPECT_TRUE(keeper_.Fresh(absl::Now()));
  EXPECT_FALSE(keeper_.Fresh(absl::Now() + absl::Seconds(2)));
}

TEST_F(SessionKeeperTest, TheFirstHeartbeatIsWatchedAndReadsTheMembership) {
  UntilDue();
  auto answer = keeper_.Heartbeat();
  ASSERT_TRUE(answer.ok());
  ASSERT_TRUE(answer->has_value());
  EXPECT_EQ((*answer)->settings.parts, 4);
  EXPECT_EQ((*answer)->membership, "1");
  // Alone: the next watched one is a TTL away; the ones between are not.
  answer = keeper_.Heartbeat();
  ASSERT_TRUE(answer.ok() && answer->has_value());
  EXPECT_FALSE((*answer)->membership.has_value());
  EXPECT_THAT(store_.watched, ::testing::ElementsAre(true, false));
}

TEST_F(SessionKeeperTest, AnotherMemberAlreadyExpiredMakesAReapDue) {
  store_.next_expiry = -absl::Seconds(1);
  UntilDue();
  ASSERT_TRUE(keeper_.Heartbeat().ok());
  ASSERT_TRUE(keeper_.reap_due());
  auto reaped = keeper_.Reap();
  ASSERT_TRUE(reaped.ok());
  EXPECT_THAT(*reaped, ::testing::ElementsAre("gone"));
  EXPECT_FALSE(keeper_.reap_due());
  // A reap stops by the next heartbeat, so the session cannot lapse.
  ASSERT_EQ(store_.reap_deadlines.size(), 1u);
  EXPECT_EQ(store_.reap_deadlines[0], keeper_.next_heartbeat());
}

TEST_F(SessionKeeperTest, ASoonExpiryWatchesAgainRightAfterIt) {
  store_.next_expiry = absl::Milliseconds(1);
  UntilDue();
  ASSERT_TRUE(keeper_.Heartbeat().ok());
  EXPECT_FALSE(keeper_.reap_due());
  absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(keeper_.Heartbeat().ok());
  EXPECT_THAT(store_.watched, ::testing::ElementsAre(true, true));
}

TEST_F(SessionKeeperTest, AViewShowingExpiredSessionsMakesAReapDue) {
  EXPECT_FALSE(keeper_.reap_due());
  keeper_.SawExpired();
  EXPECT_TRUE(keeper_.reap_due());
}

TEST_F(SessionKeeperTest, AnExpiredSessionIsNoAnswer) {
  store_.live.clear();
  auto answer = keeper_.Heartbeat();
  ASSERT_TRUE(answer.ok());
  EXPECT_FALSE(answer->has_value());
}

TEST_F(SessionKeeperTest, AFailedHeartbeatIsTriedAgainAQuarterIntervalLater) {
  store_.fail = absl::UnavailableError("connection lost");
  const absl::Time before = absl::Now();
  EXPECT_TRUE(absl::IsUnavailable(keeper_.Heartbeat().status()));
  EXPECT_GE(keeper_.next_heartbeat(), before + absl::Milliseconds(5));
  EXPECT_LE(keeper_.next_heartbeat(), absl::Now() + absl::Milliseconds(5));
}

TEST_F(SessionKeeperTest, AKeptControlConnectionIsReplacedAHeartbeatLate) {
  // A heartbeat interval after the next one is due, and never later than
  // an interval before the TTL ends.
  const absl::Time at = keeper_.ReplaceControlAt();
  EXPECT_GE(at, keeper_.next_heartbeat() + absl::Milliseconds(19));
  EXPECT_LE(at, absl::Now() + absl::Milliseconds(980));
}

TEST_F(SessionKeeperTest, WhileDrainingOneHeartbeatPerIntervalIsDue) {
  const absl::Time now = keeper_.next_heartbeat();
  EXPECT_TRUE(keeper_.DrainBeatDue(now));
  EXPECT_FALSE(keeper_.DrainBeatDue(now + absl::Milliseconds(10)));
  EXPECT_TRUE(keeper_.DrainBeatDue(now + absl::Milliseconds(20)));
  keeper_.Ended();
  EXPECT_FALSE(keeper_.DrainBeatDue(now + absl::Seconds(5)));
}

}  // namespace
}  // namespace sqlgroup
