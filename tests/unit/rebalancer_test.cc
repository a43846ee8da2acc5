// The Rebalancer against an in-memory store and a real PartScheduler: what
// a member takes, drains, keeps and loses, with no database.
#include "member/rebalancer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "spdlog/sinks/null_sink.h"
#include "spdlog/spdlog.h"
#include "support/fake_membership_store.h"

namespace sqlgroup {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Again = Rebalancer::Again;

std::vector<int> Keys(const std::map<int, int64_t>& m) {
  std::vector<int> keys;
  for (const auto& [k, v] : m) keys.push_back(k);
  return keys;
}

class RecordingListener : public RebalanceListener {
 public:
  void OnPartsAssigned(const std::vector<int>& parts) override {
    assigned.push_back(parts);
  }
  void OnPartsRevoked(const std::vector<int>& parts) override {
    revoked.push_back(parts);
  }
  void OnPartsLost(const std::vector<int>& parts) override {
    lost.push_back(parts);
  }
  std::vector<std::vector<int>> assigned, revoked, lost;
};

class RebalancerTest : public ::testing::Test {
 protected:
  RebalancerTest() { store_.live = {"a"}; }

  Rebalancer& rebalancer() {
    if (!rebalancer_) {
      RebalancerConfig config{.group = "g",
                              .drain_timeout = drain_timeout_,
                              .listener = &listener_};
      config.cut_off = [this](const std::string& session,
                              const std::vector<int>& parts) {
        cut_offs_.push_back({session, parts});
      };
      rebalancer_ = std::make_unique<Rebalancer>(
          config, store_, scheduler_, metrics_,
          spdlog::null_logger_mt("rebalancer_test" +
                                 std::to_string(++loggers_)));
    }
    return *rebalancer_;
  }

  absl::StatusOr<Again> Pass(const std::string& session = "a") {
    return rebalancer().Rebalance(session, store_.View(session), assignor_,
                                  absl::Now(), [this] { return keep_alive_; });
  }

  // Hands `part`'s next claim to a worker: the part is busy until the
  // claim finishes (FinishClaim).
  PartTask Claim(int part) {
    const absl::Time give_up = absl::Now() + absl::Seconds(5);
    while (absl::Now() < give_up) {
      PartTask task = scheduler_.Next(absl::Now() + absl::Milliseconds(50));
      if (task.kind == PartTask::Kind::kProbe) {
        scheduler_.FinishProbe({part});
      } else if (task.kind == PartTask::Kind::kClaim && task.ref.part == part) {
        return task;
      } else if (task.kind == PartTask::Kind::kClaim) {
        scheduler_.FinishClaim(task.ref.part, task.ref.epoch, false,
                               task.cursor);
      }
    }
    ADD_FAILURE() << "part " << part << " was never handed out";
    return {};
  }

  static inline int loggers_ = 0;
  testing::FakeMembershipStore store_{4};
  PartScheduler scheduler_{absl::Milliseconds(10), absl::ZeroDuration()};
  MemberMetrics metrics_{nullptr, "g", "test"};
  LexicalRangeAssignor assignor_;
  RecordingListener listener_;
  absl::Duration drain_timeout_ = absl::Hours(1);
  bool keep_alive_ = true;
  std::vector<std::pair<std::string, std::vector<int>>> cut_offs_;
  std::unique_ptr<Rebalancer> rebalancer_;
};

TEST_F(RebalancerTest, ALoneMemberTakesEveryFreePartAndIsDone) {
  ASSERT_EQ(*Pass(), Again::kWhenDue);
  EXPECT_THAT(Keys(scheduler_.Parts()), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(listener_.assigned, ElementsAre(ElementsAre(0, 1, 2, 3)));
}

TEST_F(RebalancerTest, AJoinerWaitsForPartsOthersStillOwn) {
  for (int part = 0; part < 4; ++part) store_.owners[part] = {part, "a", 1};
  store_.live.insert("b");
  // b's target is 2 and 3, which a owns: nothing to take yet, ask soon.
  ASSERT_EQ(*Pass("b"), Again::kSoon);
  EXPECT_THAT(scheduler_.Parts(), IsEmpty());
}

TEST_F(RebalancerTest, IdlePartsMovingAwayAreDroppedAtOnce) {
  ASSERT_TRUE(Pass().ok());
  store_.live.insert("b");
  // Nothing runs on 2 and 3: released in the same pass.
  ASSERT_EQ(*Pass(), Again::kNow);
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1));
  EXPECT_THAT(Keys(scheduler_.Parts()), ElementsAre(0, 1));
  EXPECT_THAT(listener_.revoked, ElementsAre(ElementsAre(2, 3)));
  EXPECT_THAT(store_.revoking, IsEmpty());
  EXPECT_FALSE(rebalancer().draining());
}

TEST_F(RebalancerTest, ARevocationWaitsForTheHandlerCallOnABusyPart) {
  ASSERT_TRUE(Pass().ok());
  const PartTask busy = Claim(2);
  store_.live.insert("b");
  ASSERT_EQ(*Pass(), Again::kNow);  // 3 went
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1, 2));
  EXPECT_THAT(store_.revoking, ElementsAre(2));  // shown by describe
  EXPECT_TRUE(rebalancer().draining());
  EXPECT_EQ(*rebalancer().FinishDrains("a"), Again::kWhenDue);
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1, 2));
  EXPECT_THAT(cut_offs_, IsEmpty());  // drain_timeout is an hour away
  // The call returns: the part moves.
  scheduler_.FinishClaim(2, busy.ref.epoch, false, busy.cursor);
  EXPECT_EQ(*rebalancer().FinishDrains("a"), Again::kNow);
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1));
  EXPECT_FALSE(rebalancer().draining());
}

TEST_F(RebalancerTest, PastDrainTimeoutCallsAreCutOffAndThePartStillWaits) {
  drain_timeout_ = absl::ZeroDuration();
  ASSERT_TRUE(Pass().ok());
  const PartTask busy = Claim(3);
  store_.live.insert("b");
  ASSERT_TRUE(Pass().ok());
  ASSERT_FALSE(cut_offs_.empty());
  EXPECT_EQ(cut_offs_.back().first, "a");
  EXPECT_THAT(cut_offs_.back().second, ElementsAre(3));
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1, 3));
  // Every round cuts again (calls that began since), until it returns.
  const size_t cuts = cut_offs_.size();
  EXPECT_EQ(*rebalancer().FinishDrains("a"), Again::kWhenDue);
  EXPECT_EQ(cut_offs_.size(), cuts + 1);
  scheduler_.FinishClaim(3, busy.ref.epoch, false, busy.cursor);
  EXPECT_EQ(*rebalancer().FinishDrains("a"), Again::kNow);
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1));
}

TEST_F(RebalancerTest, ARevokingPartTargetedAgainIsKept) {
  ASSERT_TRUE(Pass().ok());
  const PartTask busy = Claim(2);
  store_.live.insert("b");
  ASSERT_TRUE(Pass().ok());
  ASSERT_THAT(store_.revoking, ElementsAre(2));
  store_.live.erase("b");  // b leaves before a let go
  ASSERT_TRUE(Pass().ok());
  EXPECT_THAT(store_.revoking, IsEmpty());
  EXPECT_FALSE(rebalancer().draining());
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1, 2, 3));
  scheduler_.FinishClaim(2, busy.ref.epoch, false, busy.cursor);
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1, 2, 3));
}

TEST_F(RebalancerTest, APartCountChangeDrainsTheOldLayoutBeforeTakingTheNew) {
  ASSERT_TRUE(Pass().ok());
  const PartTask busy = Claim(1);
  store_.settings.parts = 8;  // group alter --parts 8
  ASSERT_EQ(*Pass(), Again::kSoon);
  // Part 1 still runs a call: nothing of the new layout yet.
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(1));
  EXPECT_THAT(store_.takes_under, ElementsAre(4));
  scheduler_.FinishClaim(1, busy.ref.epoch, false, busy.cursor);
  ASSERT_EQ(*Pass(), Again::kNow);
  EXPECT_THAT(store_.PartsOf("a"), IsEmpty());
  ASSERT_EQ(*Pass(), Again::kWhenDue);
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(store_.takes_under, ElementsAre(4, 8));
}

TEST_F(RebalancerTest, PartsTakenFromItAreLostAndTheirCallsCutOff) {
  ASSERT_TRUE(Pass().ok());
  const PartTask busy = Claim(0);
  // Another session owns part 0 now (a's take was reaped and retaken).
  store_.owners[0] = {0, "b", 99};
  ASSERT_TRUE(Pass().ok());
  EXPECT_THAT(Keys(scheduler_.Parts()), ElementsAre(1, 2, 3));
  EXPECT_THAT(listener_.lost, ElementsAre(ElementsAre(0)));
  ASSERT_FALSE(cut_offs_.empty());
  EXPECT_THAT(cut_offs_.back().second, ElementsAre(0));
  scheduler_.FinishClaim(0, busy.ref.epoch, false, busy.cursor);
}

TEST_F(RebalancerTest, ALostSessionVoidsEveryPart) {
  ASSERT_TRUE(Pass().ok());
  const PartTask busy = Claim(2);
  rebalancer().LoseAll("a", "session expired");
  EXPECT_THAT(scheduler_.Parts(), IsEmpty());
  EXPECT_THAT(listener_.lost, ElementsAre(ElementsAre(0, 1, 2, 3)));
  ASSERT_EQ(cut_offs_.size(), 1u);
  EXPECT_THAT(cut_offs_[0].second, ElementsAre(2));
  scheduler_.FinishClaim(2, busy.ref.epoch, false, busy.cursor);
}

TEST_F(RebalancerTest, AFailedTakeEndsThePassWithItsStatus) {
  store_.fail_take = absl::UnavailableError("connection lost");
  EXPECT_TRUE(absl::IsUnavailable(Pass().status()));
  EXPECT_THAT(scheduler_.Parts(), IsEmpty());
  ASSERT_EQ(*Pass(), Again::kWhenDue);  // the next pass takes them
  EXPECT_THAT(Keys(scheduler_.Parts()), ElementsAre(0, 1, 2, 3));
}

TEST_F(RebalancerTest, AFailedDropKeepsThePartsForTheNextPass) {
  ASSERT_TRUE(Pass().ok());
  store_.live.insert("b");
  store_.fail_drop = absl::AbortedError("deadlock detected");
  EXPECT_TRUE(absl::IsAborted(Pass().status()));
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE(rebalancer().draining());
  EXPECT_EQ(*rebalancer().FinishDrains("a"), Again::kNow);
  EXPECT_THAT(store_.PartsOf("a"), ElementsAre(0, 1));
}

TEST_F(RebalancerTest, AHeartbeatThatFailsStopsThePassBeforeItsStatements) {
  keep_alive_ = false;
  EXPECT_EQ(*Pass(), Again::kWhenDue);
  EXPECT_THAT(store_.PartsOf("a"), IsEmpty());
  EXPECT_THAT(store_.takes_under, IsEmpty());
}

TEST_F(RebalancerTest, LeavingRevokesEveryPartAndMarksTheBusyOnes) {
  ASSERT_TRUE(Pass().ok());
  const PartTask busy = Claim(1);
  std::vector<int> marked;
  ASSERT_TRUE(rebalancer().RevokeAll("a", absl::Now(), &marked).ok());
  EXPECT_THAT(marked, ElementsAre(1));
  EXPECT_THAT(store_.revoking, ElementsAre(1));
  EXPECT_TRUE(scheduler_.ShouldYield(0, store_.owners[0].epoch));
  scheduler_.FinishClaim(1, busy.ref.epoch, false, busy.cursor);
  rebalancer().FinishLeave("a");
  EXPECT_THAT(listener_.revoked, ElementsAre(ElementsAre(0, 1, 2, 3)));
  rebalancer().Forget("a");
  EXPECT_THAT(scheduler_.Parts(), IsEmpty());
}

}  // namespace
}  // namespace sqlgroup
