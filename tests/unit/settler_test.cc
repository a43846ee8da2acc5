// The settler's decisions over fakes (no database): what an item's handler
// outcome and the store's errors make it write, count and say.
#include "member/settler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "keyspace.h"
#include "member/backoff.h"
#include "spdlog/sinks/null_sink.h"
#include "spdlog/spdlog.h"
#include "support/fake_item_acks.h"

namespace sqlgroup {
namespace {

using testing::FakeItemAcks;

Item ItemNumbered(int n, int attempt = 1) {
  Item item;
  item.id =
      absl::StrCat("00000000-0000-0000-0000-0000000000", n < 10 ? "0" : "", n);
  item.attempt = attempt;
  return item;
}

// Items `first` to `last`, numbered as ItemNumbered.
std::vector<Item> ItemsNumbered(int first, int last) {
  std::vector<Item> items;
  for (int n = first; n <= last; ++n) items.push_back(ItemNumbered(n));
  return items;
}

std::vector<size_t> SharedAcks(FakeItemAcks& acks) {
  absl::MutexLock lock(&acks.mu);
  return acks.shared_acks;
}

class SettlerTest : public ::testing::Test {
 protected:
  SettlerTest() { scheduler_.Add(ref_, PartRange(0, 1)); }

  // A settler of single items (a Handler), or of batches.
  Settler Make(bool batched = false, SqlFunction function = {},
               bool shared = false) {
    return Make(acks_, connection_, batched, function,
                shared ? std::make_shared<SharedCommit>() : nullptr);
  }
  Settler Make(FakeItemAcks& acks, testing::FakeTaskConnection& connection,
               bool batched, SqlFunction function,
               std::shared_ptr<SharedCommit> shared, int index = 0) {
    SettlerConfig config;
    config.group = "g";
    config.kind.batched = batched;
    config.kind.sql_function = function;
    if (batched) {
      config.batch_handler = [](const std::vector<Item>&, AckTransaction&) {
        return absl::OkStatus();
      };
    } else {
      config.handler = [](const Item&, AckTransaction&) {
        return absl::OkStatus();
      };
    }
    config.shared_commit = std::move(shared);
    config.key_order = key_order_;
    config.max_attempts = 3;
    config.sql_calls_per_commit = sql_calls_per_commit_;
    config.backoff_initial = absl::Seconds(1);
    config.backoff_max = absl::Seconds(30);
    return Settler(index, config, acks, connection, scheduler_, metrics_, log_);
  }

  const store::ClaimRef ref_{"g", "s", 0, 1};
  int sql_calls_per_commit_ = 32;
  std::shared_ptr<std::atomic<bool>> key_order_ =
      std::make_shared<std::atomic<bool>>(false);
  FakeItemAcks acks_;
  testing::FakeTaskConnection connection_;
  PartScheduler scheduler_{absl::Hours(1), absl::ZeroDuration()};
  MemberMetrics metrics_{nullptr, "g", "test"};
  std::shared_ptr<spdlog::logger> log_ = std::make_shared<spdlog::logger>(
      "t", std::make_shared<spdlog::sinks::null_sink_mt>());
};

TEST_F(SettlerTest, AnItemWhoseHandlerSucceedsIsAcknowledgedOnce) {
  Settler settler = Make();
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kAcked);
  EXPECT_EQ(acks_.handled.size(), 1u);
  EXPECT_EQ(metrics_.Snapshot().acked, 1);
  EXPECT_TRUE(acks_.released.empty());
  EXPECT_TRUE(connection_.disconnects.empty());
}

TEST_F(SettlerTest, AFailureIsReleasedWithABackoffAndCountsAnAttempt) {
  Settler settler = Make();
  acks_.script = [](auto&, auto) {
    return FakeItemAcks::Verdict(absl::InternalError("boom"));
  };
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kReleased);
  ASSERT_EQ(acks_.released.size(), 1u);
  EXPECT_TRUE(acks_.released[0].count_attempt);
  EXPECT_EQ(acks_.released[0].error, "boom");
  // backoff_initial, with its jitter.
  EXPECT_GE(acks_.released[0].backoff, absl::Seconds(1) * kBackoffJitterLow);
  EXPECT_LT(acks_.released[0].backoff, absl::Seconds(1) * kBackoffJitterHigh);
  EXPECT_EQ(metrics_.Snapshot().failed, 1);
  EXPECT_TRUE(acks_.dead.empty());
}

TEST_F(SettlerTest, TheLastAttemptsFailureIsDeadLettered) {
  Settler settler = Make();
  acks_.script = [](auto&, auto) {
    return FakeItemAcks::Verdict(absl::InternalError("boom"));
  };
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1, /*attempt=*/3)}),
            Settler::Outcome::kFailed);
  ASSERT_EQ(acks_.dead.size(), 1u);
  EXPECT_TRUE(acks_.dead[0].count_attempt);
  EXPECT_TRUE(acks_.released.empty());
  EXPECT_EQ(metrics_.Snapshot().dead_lettered, 1);
}

TEST_F(SettlerTest, ADeadLetterVerdictDeadLettersOnTheFirstAttempt) {
  Settler settler = Make();
  acks_.script = [](auto&, auto) {
    return FakeItemAcks::Verdict(DeadLetterVerdict("never parses"));
  };
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kFailed);
  ASSERT_EQ(acks_.dead.size(), 1u);
  EXPECT_EQ(acks_.dead[0].error, "never parses");
}

TEST_F(SettlerTest, ARetryAfterVerdictWaitsAsLongAsAsked) {
  Settler settler = Make();
  acks_.script = [](auto&, auto) {
    return FakeItemAcks::Verdict(
        RetryAfterVerdict(absl::Seconds(7), "rate limited"));
  };
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kReleased);
  ASSERT_EQ(acks_.released.size(), 1u);
  EXPECT_EQ(acks_.released[0].backoff, absl::Seconds(7));
}

TEST_F(SettlerTest, AConflictCountsNoAttemptUntilTenInARow) {
  Settler settler = Make();
  acks_.script = [](auto&, auto) {
    return FakeItemAcks::Error(absl::AbortedError("deadlock detected"));
  };
  for (int i = 1; i < 10; ++i) {
    EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
              Settler::Outcome::kReleased);
    ASSERT_EQ(acks_.released.size(), static_cast<size_t>(i));
    EXPECT_FALSE(acks_.released.back().count_attempt) << i;
    // From 200 ms (not backoff_initial's 1 s), doubling up to 8x.
    EXPECT_LT(acks_.released.back().backoff,
              absl::Milliseconds(200 * 8) * kBackoffJitterHigh);
  }
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kReleased);
  EXPECT_TRUE(acks_.released.back().count_attempt);
  EXPECT_NE(acks_.released.back().error.find("conflicted 10 times in a row"),
            std::string::npos);
  EXPECT_EQ(metrics_.Snapshot().failed, 1);
}

TEST_F(SettlerTest, ABrokenConnectionOrACommitInDoubtSettlesNothing) {
  Settler settler = Make();
  for (const absl::Status& error :
       {absl::UnavailableError("connection lost during ack"),
        absl::UnknownError("commit outcome unknown")}) {
    acks_.script = [&](auto&, auto) {
      return FakeItemAcks::Error(error, /*acking=*/true);
    };
    EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
              Settler::Outcome::kBroken);
  }
  EXPECT_EQ(connection_.disconnects.size(), 2u);
  EXPECT_TRUE(acks_.released.empty());
  EXPECT_TRUE(acks_.dead.empty());
  EXPECT_EQ(metrics_.Snapshot().acked, 0);
}

TEST_F(SettlerTest, AnAckThatFailsIsNotHeldAgainstTheItem) {
  Settler settler = Make();
  acks_.script = [](auto&, auto) {
    return FakeItemAcks::Error(
        absl::PermissionDeniedError("permission denied for table items"),
        /*acking=*/true);
  };
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kBroken);
  EXPECT_TRUE(acks_.released.empty());
  EXPECT_EQ(metrics_.Snapshot().failed, 0);
}

TEST_F(SettlerTest, AnAckTheFenceRefusesIsALostClaim) {
  Settler settler = Make();
  acks_.script = [](auto&, auto) {
    store::HandledAndAcked r = FakeItemAcks::Acked(0);
    r.alone = false;  // in the handler's transaction: rolled back
    return r;
  };
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kLost);
  EXPECT_EQ(metrics_.Snapshot().lost_claims, 1);
  EXPECT_EQ(metrics_.Snapshot().acked, 0);
}

TEST_F(SettlerTest, AFailedBatchIsTriedSinglyAndOnlyTheFaultyItemCounts) {
  Settler settler = Make(/*batched=*/true);
  const std::vector<Item> batch = {ItemNumbered(1), ItemNumbered(2),
                                   ItemNumbered(3)};
  acks_.script = [&](const std::vector<std::string>& ids, auto) {
    for (const std::string& id : ids) {
      if (id == batch[1].id) {
        return FakeItemAcks::Verdict(absl::InternalError("bad item"));
      }
    }
    return FakeItemAcks::Acked(ids.size());
  };
  const Settler::Progress p = settler.ProcessItems(ref_, batch, absl::Now());
  EXPECT_EQ(p.settled, 3u);
  EXPECT_FALSE(p.acked);
  ASSERT_EQ(acks_.handled.size(), 4u);  // the batch, then each item
  ASSERT_EQ(acks_.released.size(), 1u);
  EXPECT_EQ(acks_.released[0].id, batch[1].id);
  EXPECT_EQ(metrics_.Snapshot().acked, 2);
}

// A claim writes nothing, so a pause or a cancel after it is seen only by
// reading again: items that waited past kClaimFreshFor are, and the first
// no longer due stops the run (the sweep claims again from it).
TEST_F(SettlerTest, ItemsThatWaitedAreReadAgainAndStopAtOneNoLongerDue) {
  Settler settler = Make();
  const std::vector<Item> batch = {ItemNumbered(1), ItemNumbered(2),
                                   ItemNumbered(3)};
  acks_.no_longer_due = {batch[1].id};
  Settler::Progress p =
      settler.ProcessItems(ref_, batch, absl::InfiniteFuture());
  EXPECT_EQ(p.settled, 3u);  // fresh: handed out as claimed
  EXPECT_TRUE(acks_.still_due_asked.empty());

  acks_.handled.clear();
  p = settler.ProcessItems(ref_, batch, absl::Now() - absl::Seconds(1));
  EXPECT_EQ(p.settled, 1u);
  EXPECT_FALSE(p.broken);
  ASSERT_EQ(acks_.handled.size(), 1u);
  EXPECT_EQ(acks_.handled[0], std::vector<std::string>{batch[0].id});
  ASSERT_EQ(acks_.still_due_asked.size(), 1u);  // once, for the whole run
  EXPECT_EQ(acks_.still_due_asked[0].size(), 3u);
}

TEST_F(SettlerTest, ABatchThatWaitedGoesWholeOrNotAtAll) {
  Settler settler = Make(/*batched=*/true);
  const std::vector<Item> batch = {ItemNumbered(1), ItemNumbered(2)};
  acks_.no_longer_due = {batch[1].id};
  Settler::Progress p =
      settler.ProcessItems(ref_, batch, absl::Now() - absl::Seconds(1));
  EXPECT_EQ(p.settled, 0u);
  EXPECT_FALSE(p.broken);
  EXPECT_TRUE(acks_.handled.empty());
  acks_.no_longer_due.clear();
  p = settler.ProcessItems(ref_, batch, absl::Now() - absl::Seconds(1));
  EXPECT_EQ(p.settled, 2u);
  EXPECT_EQ(acks_.handled.size(), 1u);
}

TEST_F(SettlerTest, AFailedBatchTriedSinglyLeavesWhatIsNoLongerDue) {
  Settler settler = Make(/*batched=*/true);
  const std::vector<Item> batch = {ItemNumbered(1), ItemNumbered(2),
                                   ItemNumbered(3)};
  acks_.script = [&](const std::vector<std::string>& ids, auto) {
    if (ids.size() > 1) {
      // Meanwhile, an operator cancels the second item.
      acks_.no_longer_due = {batch[1].id};
      return FakeItemAcks::Verdict(absl::InternalError("bad batch"));
    }
    return FakeItemAcks::Acked(ids.size());
  };
  const Settler::Progress p =
      settler.ProcessItems(ref_, batch, absl::InfiniteFuture());
  EXPECT_EQ(p.settled, 3u);
  ASSERT_EQ(acks_.handled.size(), 3u);  // the batch, then two of its items
  EXPECT_EQ(acks_.handled[1], std::vector<std::string>{batch[0].id});
  EXPECT_EQ(acks_.handled[2], std::vector<std::string>{batch[2].id});
  EXPECT_EQ(acks_.still_due_asked.size(), 1u);
}

// Under per-key order, an item skipped as paused holds back what follows
// it in its block (ItemNumbered's ids share one), as a retry does.
TEST_F(SettlerTest, UnderKeyOrderASkippedItemHoldsItsBlockBack) {
  key_order_->store(true);
  Settler settler = Make(/*batched=*/true);
  std::vector<Item> batch = {ItemNumbered(1), ItemNumbered(2), ItemNumbered(3)};
  for (Item& item : batch) item.key = "k";
  acks_.script = [&](const std::vector<std::string>& ids, auto) {
    if (ids.size() > 1) {
      acks_.no_longer_due = {batch[0].id};  // the key's head paused
      return FakeItemAcks::Verdict(absl::InternalError("bad batch"));
    }
    return FakeItemAcks::Acked(ids.size());
  };
  settler.ProcessItems(ref_, batch, absl::InfiniteFuture());
  EXPECT_EQ(acks_.handled.size(), 1u);  // the batch only
}

TEST_F(SettlerTest, AReadAgainThatBreaksDropsTheConnectionAndOthersHandOut) {
  Settler settler = Make();
  acks_.fail_still_due = absl::UnavailableError("server closed");
  Settler::Progress p = settler.ProcessItems(ref_, {ItemNumbered(1)},
                                             absl::Now() - absl::Seconds(1));
  EXPECT_TRUE(p.broken);
  EXPECT_EQ(p.settled, 0u);
  EXPECT_EQ(connection_.disconnects.size(), 1u);
  EXPECT_TRUE(acks_.handled.empty());
  // Any other failure to read: the claim stands, as read.
  acks_.fail_still_due = absl::PermissionDeniedError("no");
  p = settler.ProcessItems(ref_, {ItemNumbered(1)},
                           absl::Now() - absl::Seconds(1));
  EXPECT_EQ(p.settled, 1u);
  EXPECT_EQ(acks_.handled.size(), 1u);
}

TEST_F(SettlerTest, ABatchAckCarriesThePartsNextClaim) {
  Settler settler = Make(/*batched=*/true);
  acks_.script = [](const std::vector<std::string>& ids,
                    const store::CarriedClaim* carry) {
    store::HandledAndAcked r = FakeItemAcks::Acked(ids.size());
    EXPECT_NE(carry, nullptr);
    EXPECT_EQ(carry->limit, 64);
    store::AckedAndClaimed read;
    read.acked = r.deleted;
    read.next = std::vector<Item>{ItemNumbered(9)};
    r.carried = std::move(read);
    return r;
  };
  Settler::NextClaim next;
  next.ask.from = 10;
  next.ask.last = 20;
  const Settler::Progress p = settler.ProcessItems(
      ref_, {ItemNumbered(1), ItemNumbered(2)}, absl::Now(), &next);
  EXPECT_TRUE(p.acked);
  ASSERT_TRUE(next.sent);
  ASSERT_TRUE(next.items.ok());
  ASSERT_EQ(next.items->size(), 1u);
  EXPECT_EQ(next.items->front().id, ItemNumbered(9).id);
}

TEST_F(SettlerTest, ACanceledSqlFunctionSaysWhichLimitItRanInto) {
  Settler settler = Make(/*batched=*/false, SqlFunction{.name = "app.handle"});
  acks_.function_error = absl::DeadlineExceededError(
      "sql_function app.handle was canceled (SQLSTATE 57014)");
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kReleased);
  ASSERT_EQ(acks_.released.size(), 1u);
  EXPECT_NE(acks_.released[0].error.find("half the group's TTL (5s)"),
            std::string::npos)
      << acks_.released[0].error;
}

TEST_F(SettlerTest, AnOutageOpensTheCircuitAndLaterItemsWait) {
  Settler settler = Make();
  acks_.script = [](auto&, auto) {
    return FakeItemAcks::Verdict(absl::UnavailableError("smtp down"));
  };
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(i)}),
              Settler::Outcome::kReleased);
  }
  EXPECT_EQ(acks_.circuit_reports, std::vector<bool>{true});
  const size_t calls = acks_.handled.size();
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(6)}),
            Settler::Outcome::kRetryLater);
  EXPECT_EQ(acks_.handled.size(), calls);  // not handed to the handler
}

TEST_F(SettlerTest, ADeadOwnersDeliveriesCountAndAPoisonItemEndsThere) {
  Settler settler = Make();
  acks_.delivered_before = {{ItemNumbered(1).id, 1}, {ItemNumbered(2).id, 3}};
  std::vector<Item> items = {ItemNumbered(1), ItemNumbered(2), ItemNumbered(3)};
  ASSERT_TRUE(settler.CountDeliveriesOfTheDead(ref_, absl::UnixEpoch(), nullptr,
                                               items));
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].attempt, 2);  // its delivery there counted
  EXPECT_EQ(items[1].id, ItemNumbered(3).id);
  EXPECT_EQ(items[1].attempt, 1);
  ASSERT_EQ(acks_.dead.size(), 1u);
  EXPECT_EQ(acks_.dead[0].id, ItemNumbered(2).id);
  EXPECT_FALSE(acks_.dead[0].count_attempt);  // counted already
}

// A claim of the same pass that reads items again (after a yield, or from
// one no longer due) counts only those past what was counted.
TEST_F(SettlerTest, ADeadOwnersDeliveriesCountOncePerPass) {
  Settler settler = Make();
  DeadCounted mark;
  std::vector<Item> first = {ItemNumbered(1), ItemNumbered(2)};
  ASSERT_TRUE(
      settler.CountDeliveriesOfTheDead(ref_, absl::UnixEpoch(), &mark, first));
  std::vector<Item> again = {ItemNumbered(2), ItemNumbered(3)};
  ASSERT_TRUE(
      settler.CountDeliveriesOfTheDead(ref_, absl::UnixEpoch(), &mark, again));
  std::vector<Item> once_more = {ItemNumbered(3)};
  ASSERT_TRUE(settler.CountDeliveriesOfTheDead(ref_, absl::UnixEpoch(), &mark,
                                               once_more));
  ASSERT_EQ(acks_.dead_count_asked.size(), 2u);  // the third asked nothing
  EXPECT_EQ(acks_.dead_count_asked[0].size(), 2u);
  EXPECT_EQ(acks_.dead_count_asked[1],
            std::vector<std::string>{ItemNumbered(3).id});

  // A poison item whose dead-lettering failed is counted (and tried)
  // again when read again, not handed out as counted.
  DeadCounted poison_mark;
  acks_.delivered_before = {{ItemNumbered(5).id, 3}};  // max_attempts 3
  acks_.fail_writes = absl::InternalError("no room");
  std::vector<Item> poison = {ItemNumbered(4), ItemNumbered(5)};
  ASSERT_TRUE(settler.CountDeliveriesOfTheDead(ref_, absl::UnixEpoch(),
                                               &poison_mark, poison));
  EXPECT_EQ(poison.size(), 1u);  // not handed out
  acks_.fail_writes = absl::OkStatus();
  poison = {ItemNumbered(4), ItemNumbered(5)};
  ASSERT_TRUE(settler.CountDeliveriesOfTheDead(ref_, absl::UnixEpoch(),
                                               &poison_mark, poison));
  EXPECT_EQ(acks_.dead_count_asked.back().size(), 2u);
  ASSERT_EQ(acks_.dead.size(), 1u);
  EXPECT_EQ(acks_.dead[0].id, ItemNumbered(5).id);
}

TEST_F(SettlerTest, AReleaseThatCannotBeWrittenIsReadAgain) {
  Settler settler = Make();
  acks_.script = [](auto&, auto) {
    return FakeItemAcks::Verdict(absl::InternalError("boom"));
  };
  acks_.fail_writes = absl::UnavailableError("connection lost");
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kBroken);
  EXPECT_EQ(connection_.disconnects.size(), 1u);
}

TEST_F(SettlerTest, WithASharedCommitAnAckAloneGoesThroughIt) {
  Settler settler = Make(/*batched=*/false, {}, /*shared=*/true);
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kAcked);
  EXPECT_EQ(SharedAcks(acks_), std::vector<size_t>{1});
  EXPECT_EQ(metrics_.Snapshot().acked, 1);
  // A carried claim needs a statement of its own.
  Settler::NextClaim next;
  next.ask.of_key = true;
  acks_.script = [](const std::vector<std::string>& ids, auto) {
    store::HandledAndAcked r = FakeItemAcks::Acked(ids.size());
    store::AckedAndClaimed read;
    read.acked = r.deleted;
    read.next = std::vector<Item>{};
    r.carried = std::move(read);
    return r;
  };
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(2)}, &next),
            Settler::Outcome::kAcked);
  EXPECT_TRUE(next.sent);
  EXPECT_EQ(acks_.defer_asked, (std::vector<bool>{true, false}));
  EXPECT_EQ(SharedAcks(acks_).size(), 1u);
}

TEST_F(SettlerTest, AnItemTheSharedAckFindsGoneIsALostClaim) {
  Settler settler = Make(/*batched=*/false, {}, /*shared=*/true);
  acks_.lost = {ItemNumbered(1).id};
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kLost);
  EXPECT_EQ(metrics_.Snapshot().lost_claims, 1);
}

TEST_F(SettlerTest, ASharedAckThatBrokeItsLeadersConnectionDropsIt) {
  Settler settler = Make(/*batched=*/false, {}, /*shared=*/true);
  acks_.fail_shared = absl::UnavailableError("connection lost during ack");
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(1)}),
            Settler::Outcome::kBroken);
  EXPECT_EQ(connection_.disconnects.size(), 1u);
  acks_.fail_shared = absl::AbortedError("deadlock detected");
  EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(2)}),
            Settler::Outcome::kReleased);
  ASSERT_EQ(acks_.released.size(), 1u);
  EXPECT_FALSE(acks_.released[0].count_attempt);
}

// Three workers share commits: while the first one's statement is held in
// flight, two more acks gather behind it, and the statement that holds
// both breaks on its leader's connection. The leader drops its connection
// and reads its item again; the follower's connection is fine: it deletes
// its item again alone, and that is its ack.
TEST_F(SettlerTest, AFollowerWhoseLeaderBrokeAcksAloneOnItsOwnConnection) {
  auto shared = std::make_shared<SharedCommit>();
  FakeItemAcks acks1, acks2;
  testing::FakeTaskConnection conn1, conn2;
  absl::Notification in_flight, release;
  acks_.before_shared = [&] {
    in_flight.Notify();
    release.WaitForNotification();
  };
  for (FakeItemAcks* acks : {&acks1, &acks2}) {
    acks->fail_shared_of_many =
        absl::UnavailableError("connection lost during ack");
  }
  Settler first = Make(acks_, connection_, false, {}, shared, 0);
  Settler s1 = Make(acks1, conn1, false, {}, shared, 1);
  Settler s2 = Make(acks2, conn2, false, {}, shared, 2);
  Settler::Outcome o0, o1, o2;
  std::thread t0([&] { o0 = first.HandleBatch(ref_, {ItemNumbered(1)}); });
  in_flight.WaitForNotification();
  std::thread t1([&] { o1 = s1.HandleBatch(ref_, {ItemNumbered(2)}); });
  std::thread t2([&] { o2 = s2.HandleBatch(ref_, {ItemNumbered(3)}); });
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (shared->waiting() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(shared->waiting(), 2u);
  release.Notify();
  t0.join();
  t1.join();
  t2.join();
  EXPECT_EQ(o0, Settler::Outcome::kAcked);
  // One of the two led the broken statement; the other followed.
  const bool led1 = o1 == Settler::Outcome::kBroken;
  EXPECT_EQ(led1 ? o2 : o1, Settler::Outcome::kAcked);
  EXPECT_EQ(led1 ? o1 : o2, Settler::Outcome::kBroken);
  EXPECT_EQ((led1 ? conn1 : conn2).disconnects.size(), 1u);
  EXPECT_TRUE((led1 ? conn2 : conn1).disconnects.empty());
  // The follower's own delete, alone.
  EXPECT_EQ(SharedAcks(led1 ? acks2 : acks1), std::vector<size_t>{1});
  EXPECT_EQ(metrics_.Snapshot().acked, 2);
}

// Gathered acks (issue 43): single items whose handler wrote nothing, acked
// together once the worker commits them.

std::vector<Settler::Outcome> Outcomes(
    const std::vector<Settler::Gathered>& gathered) {
  std::vector<Settler::Outcome> outcomes;
  for (const Settler::Gathered& g : gathered) outcomes.push_back(g.outcome);
  return outcomes;
}

TEST_F(SettlerTest, GatheredAcksCommitAsOneStatement) {
  Settler settler = Make();
  for (int n = 1; n <= 3; ++n) {
    EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(n)}, nullptr,
                                  /*gather=*/true),
              Settler::Outcome::kGathered);
  }
  // Nothing written yet: the items are not acknowledged.
  EXPECT_TRUE(SharedAcks(acks_).empty());
  EXPECT_EQ(metrics_.Snapshot().acked, 0);
  EXPECT_EQ(settler.gathered(), 3u);
  const std::vector<Settler::Gathered> done = settler.CommitGathered();
  EXPECT_EQ(SharedAcks(acks_), std::vector<size_t>{3});
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[1].id, ItemNumbered(2).id);
  EXPECT_EQ(Outcomes(done),
            std::vector<Settler::Outcome>(3, Settler::Outcome::kAcked));
  EXPECT_EQ(metrics_.Snapshot().acked, 3);
  EXPECT_EQ(settler.gathered(), 0u);
  EXPECT_TRUE(settler.CommitGathered().empty());  // nothing left
}

TEST_F(SettlerTest, AHandlerThatWroteInItsTransactionIsNotGathered) {
  Settler settler = Make();
  acks_.script = [](const std::vector<std::string>& ids, auto) {
    store::HandledAndAcked r = FakeItemAcks::Acked(ids.size());
    r.alone = false;  // committed with what the handler wrote
    return r;
  };
  EXPECT_EQ(
      settler.HandleBatch(ref_, {ItemNumbered(1)}, nullptr, /*gather=*/true),
      Settler::Outcome::kAcked);
  EXPECT_EQ(settler.gathered(), 0u);
  EXPECT_EQ(metrics_.Snapshot().acked, 1);
}

TEST_F(SettlerTest, AFailedItemIsNotGathered) {
  Settler settler = Make();
  acks_.script = [](auto&, auto) {
    return FakeItemAcks::Verdict(absl::InternalError("boom"));
  };
  EXPECT_EQ(
      settler.HandleBatch(ref_, {ItemNumbered(1)}, nullptr, /*gather=*/true),
      Settler::Outcome::kReleased);
  EXPECT_EQ(settler.gathered(), 0u);
  EXPECT_EQ(acks_.released.size(), 1u);
}

TEST_F(SettlerTest, AGatheredItemTheCommitFindsGoneIsALostClaim) {
  Settler settler = Make();
  acks_.lost = {ItemNumbered(2).id};
  for (int n = 1; n <= 2; ++n) {
    settler.HandleBatch(ref_, {ItemNumbered(n)}, nullptr, /*gather=*/true);
  }
  EXPECT_EQ(Outcomes(settler.CommitGathered()),
            (std::vector<Settler::Outcome>{Settler::Outcome::kAcked,
                                           Settler::Outcome::kLost}));
  EXPECT_EQ(metrics_.Snapshot().acked, 1);
  EXPECT_EQ(metrics_.Snapshot().lost_claims, 1);
}

TEST_F(SettlerTest, GatheredAcksGoWithABrokenConnection) {
  Settler settler = Make();
  settler.HandleBatch(ref_, {ItemNumbered(1)}, nullptr, /*gather=*/true);
  connection_.connected = false;
  // No statement: the items are read again.
  EXPECT_EQ(Outcomes(settler.CommitGathered()),
            std::vector<Settler::Outcome>{Settler::Outcome::kBroken});
  EXPECT_TRUE(SharedAcks(acks_).empty());
  EXPECT_EQ(metrics_.Snapshot().acked, 0);
}

TEST_F(SettlerTest, ACommitOfGatheredAcksThatBreaksDropsTheConnection) {
  Settler settler = Make();
  settler.HandleBatch(ref_, {ItemNumbered(1)}, nullptr, /*gather=*/true);
  acks_.fail_shared = absl::UnavailableError("connection lost during ack");
  EXPECT_EQ(Outcomes(settler.CommitGathered()),
            std::vector<Settler::Outcome>{Settler::Outcome::kBroken});
  EXPECT_EQ(connection_.disconnects.size(), 1u);
  // A conflict wrote nothing: each item goes back with a backoff, as after
  // a conflict of its own ack, counting no attempt.
  connection_.connected = true;
  settler.HandleBatch(ref_, {ItemNumbered(3)}, nullptr, /*gather=*/true);
  acks_.fail_shared = absl::AbortedError("deadlock detected");
  EXPECT_EQ(Outcomes(settler.CommitGathered()),
            std::vector<Settler::Outcome>{Settler::Outcome::kReleased});
  ASSERT_EQ(acks_.released.size(), 1u);
  EXPECT_FALSE(acks_.released[0].count_attempt);
  // A refused statement wrote nothing: read again, the connection kept.
  connection_.connected = true;
  settler.HandleBatch(ref_, {ItemNumbered(2)}, nullptr, /*gather=*/true);
  acks_.fail_shared = absl::PermissionDeniedError("permission denied");
  EXPECT_EQ(Outcomes(settler.CommitGathered()),
            std::vector<Settler::Outcome>{Settler::Outcome::kBroken});
  EXPECT_EQ(connection_.disconnects.size(), 1u);
}

TEST_F(SettlerTest, ProcessItemsGathersItsItemsAcksAndCommitsThemBeforeEnding) {
  Settler settler = Make();
  const Settler::Progress p = settler.ProcessItems(
      ref_, ItemsNumbered(1, 5), absl::Now(), nullptr, /*gather=*/true);
  EXPECT_EQ(p.settled, 5u);
  EXPECT_FALSE(p.broken);
  EXPECT_EQ(SharedAcks(acks_), std::vector<size_t>{5});
  EXPECT_EQ(metrics_.Snapshot().acked, 5);
  EXPECT_EQ(settler.gathered(), 0u);
}

TEST_F(SettlerTest,
       ProcessItemsReadsAgainFromTheFirstGatheredWhenItsCommitBreaks) {
  Settler settler = Make();
  // The third fails: released on its own; the others' acks are gathered
  // around it, and their commit breaks.
  acks_.script = [](const std::vector<std::string>& ids, auto) {
    return ids.front() == ItemNumbered(3).id
               ? FakeItemAcks::Verdict(absl::InternalError("boom"))
               : FakeItemAcks::Acked(ids.size());
  };
  acks_.fail_shared = absl::UnavailableError("connection lost during ack");
  const Settler::Progress p = settler.ProcessItems(
      ref_, ItemsNumbered(1, 5), absl::Now(), nullptr, /*gather=*/true);
  EXPECT_EQ(p.settled, 0u);
  EXPECT_TRUE(p.broken);
  EXPECT_EQ(SharedAcks(acks_), std::vector<size_t>{4});
  EXPECT_EQ(acks_.released.size(), 1u);
}

TEST_F(SettlerTest, ASlowHandlersAckIsDueAtOnce) {
  Settler settler = Make();
  acks_.script = [](const std::vector<std::string>& ids, auto) {
    absl::SleepFor(GatheredAcks::kGatherFor);
    return FakeItemAcks::Acked(ids.size());
  };
  std::vector<Item> batch = {ItemNumbered(1), ItemNumbered(2)};
  settler.ProcessItems(ref_, batch, absl::Now(), nullptr, /*gather=*/true);
  // Each committed before the next handler call.
  EXPECT_EQ(SharedAcks(acks_), (std::vector<size_t>{1, 1}));
}

TEST_F(SettlerTest, GatheredAcksGoThroughTheMembersSharedCommit) {
  Settler settler = Make(/*batched=*/false, {}, /*shared=*/true);
  for (int n = 1; n <= 2; ++n) {
    EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(n)}, nullptr,
                                  /*gather=*/true),
              Settler::Outcome::kGathered);
  }
  EXPECT_EQ(Outcomes(settler.CommitGathered()),
            std::vector<Settler::Outcome>(2, Settler::Outcome::kAcked));
  EXPECT_EQ(SharedAcks(acks_), std::vector<size_t>{2});
}

TEST_F(SettlerTest, ASqlFunctionsCallsAreGroupedIntoOneCommit) {
  Settler settler = Make(/*batched=*/false, SqlFunction{.name = "app.handle"});
  const Settler::Progress p = settler.ProcessItems(
      ref_, ItemsNumbered(1, 5), absl::Now(), nullptr, /*gather=*/true);
  EXPECT_EQ(p.settled, 5u);
  EXPECT_FALSE(p.broken);
  EXPECT_EQ(acks_.grouped.size(), 5u);
  EXPECT_EQ(acks_.group_commits, std::vector<size_t>{5});
  EXPECT_TRUE(acks_.handled.empty());  // no call alone
  EXPECT_EQ(metrics_.Snapshot().acked, 5);
  EXPECT_FALSE(acks_.calls_open);
}

TEST_F(SettlerTest, AFailedGroupedCallIsReleasedAfterTheOthersCommitted) {
  Settler settler = Make(/*batched=*/false, SqlFunction{.name = "app.handle"});
  acks_.function_fails = {ItemNumbered(3).id};
  const Settler::Progress p = settler.ProcessItems(
      ref_, ItemsNumbered(1, 5), absl::Now(), nullptr, /*gather=*/true);
  EXPECT_EQ(p.settled, 5u);
  // The two before it committed before its release was written (which
  // would otherwise have run in their transaction); the two after, later.
  EXPECT_EQ(acks_.group_commits, (std::vector<size_t>{2, 2}));
  ASSERT_EQ(acks_.released.size(), 1u);
  EXPECT_EQ(acks_.released[0].id, ItemNumbered(3).id);
  EXPECT_TRUE(acks_.released[0].count_attempt);
  EXPECT_EQ(metrics_.Snapshot().acked, 4);
}

TEST_F(SettlerTest, GroupedCallsWhoseCommitIsRefusedAreReadAgainThenAlone) {
  Settler settler = Make(/*batched=*/false, SqlFunction{.name = "app.handle"});
  acks_.fail_commit = absl::InternalError("deferred constraint violated");
  const Settler::Progress p = settler.ProcessItems(
      ref_, ItemsNumbered(1, 3), absl::Now(), nullptr, /*gather=*/true);
  EXPECT_EQ(p.settled, 0u);  // read again from the first
  EXPECT_TRUE(p.broken);
  EXPECT_EQ(metrics_.Snapshot().acked, 0);
  // Read again, each call commits alone, so the one at fault gets its own
  // verdict.
  acks_.fail_commit = absl::OkStatus();
  settler.ProcessItems(ref_, ItemsNumbered(1, 3), absl::Now(), nullptr,
                       /*gather=*/true);
  EXPECT_EQ(acks_.grouped.size(), 3u);  // only the first time
  EXPECT_EQ(acks_.handled.size(), 3u);
}

TEST_F(SettlerTest, GroupedCallsLostWithTheirConnectionAreReadAgain) {
  Settler settler = Make(/*batched=*/false, SqlFunction{.name = "app.handle"});
  for (int n = 1; n <= 2; ++n) {
    EXPECT_EQ(settler.HandleBatch(ref_, {ItemNumbered(n)}, nullptr,
                                  /*gather=*/true),
              Settler::Outcome::kGathered);
  }
  // The transaction went with a connection dropped since: the next call
  // settles its calls as lost, and begins anew.
  acks_.calls_lost = absl::CancelledError("went with its connection");
  EXPECT_EQ(
      settler.HandleBatch(ref_, {ItemNumbered(3)}, nullptr, /*gather=*/true),
      Settler::Outcome::kGathered);
  EXPECT_EQ(Outcomes(settler.CommitGathered()),
            (std::vector<Settler::Outcome>{Settler::Outcome::kBroken,
                                           Settler::Outcome::kBroken,
                                           Settler::Outcome::kAcked}));
  EXPECT_TRUE(connection_.disconnects.empty());  // the new one is fine
  // A call whose connection broke: that call's transaction is gone.
  EXPECT_EQ(
      settler.HandleBatch(ref_, {ItemNumbered(4)}, nullptr, /*gather=*/true),
      Settler::Outcome::kGathered);
  acks_.calls_lost = absl::UnavailableError("connection lost during ack");
  EXPECT_EQ(
      settler.HandleBatch(ref_, {ItemNumbered(5)}, nullptr, /*gather=*/true),
      Settler::Outcome::kBroken);
  EXPECT_EQ(connection_.disconnects.size(), 1u);
  EXPECT_EQ(Outcomes(settler.CommitGathered()),
            std::vector<Settler::Outcome>{Settler::Outcome::kBroken});
}

TEST_F(SettlerTest, CallsOfATransactionThatBrokeAreNotAckedByTheNext) {
  Settler settler = Make(/*batched=*/false, SqlFunction{.name = "app.handle"});
  EXPECT_EQ(
      settler.HandleBatch(ref_, {ItemNumbered(1)}, nullptr, /*gather=*/true),
      Settler::Outcome::kGathered);
  acks_.calls_lost = absl::UnavailableError("connection lost during ack");
  EXPECT_EQ(
      settler.HandleBatch(ref_, {ItemNumbered(2)}, nullptr, /*gather=*/true),
      Settler::Outcome::kBroken);
  connection_.connected = true;  // the worker's next connection
  EXPECT_EQ(
      settler.HandleBatch(ref_, {ItemNumbered(3)}, nullptr, /*gather=*/true),
      Settler::Outcome::kGathered);
  EXPECT_EQ(Outcomes(settler.CommitGathered()),
            (std::vector<Settler::Outcome>{Settler::Outcome::kBroken,
                                           Settler::Outcome::kAcked}));
  EXPECT_EQ(acks_.group_commits, std::vector<size_t>{1});
}

TEST_F(SettlerTest, CallsAreGroupedOnlyWhenAsked) {
  sql_calls_per_commit_ = 1;  // the default
  Settler settler = Make(/*batched=*/false, SqlFunction{.name = "app.handle"});
  settler.ProcessItems(ref_, ItemsNumbered(1, 3), absl::Now(), nullptr,
                       /*gather=*/true);
  EXPECT_TRUE(acks_.grouped.empty());
  EXPECT_EQ(acks_.handled.size(), 3u);
}

TEST_F(SettlerTest, WhereCallsCannotBeGroupedEachCommitsAlone) {
  Settler settler = Make(/*batched=*/false, SqlFunction{.name = "app.handle"});
  acks_.can_group = false;  // behind a pooler in transaction mode
  EXPECT_EQ(
      settler.HandleBatch(ref_, {ItemNumbered(1)}, nullptr, /*gather=*/true),
      Settler::Outcome::kAcked);
  EXPECT_TRUE(acks_.grouped.empty());
  EXPECT_EQ(acks_.handled.size(), 1u);
}

TEST(GatheredAcks, DueWhenFullOldOrAfterASlowCall) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  GatheredAcks g;
  EXPECT_FALSE(g.Due(t0));  // nothing gathered
  g.Add({"g", "s", 0, 1}, ItemNumbered(1), absl::Milliseconds(1), t0);
  EXPECT_FALSE(g.Due(t0 + GatheredAcks::kGatherFor / 2));
  EXPECT_TRUE(g.Due(t0 + GatheredAcks::kGatherFor));  // the first waited
  EXPECT_EQ(g.Take().size(), 1u);
  EXPECT_FALSE(g.Due(t0 + absl::Hours(1)));
  for (size_t i = 0; i + 1 < GatheredAcks::kMaxItems; ++i) {
    g.Add({"g", "s", 0, 1}, ItemNumbered(static_cast<int>(i)),
          absl::ZeroDuration(), t0);
  }
  EXPECT_FALSE(g.Due(t0));
  g.Add({"g", "s", 0, 1}, ItemNumbered(99), absl::ZeroDuration(), t0);
  EXPECT_TRUE(g.Due(t0));  // full
  g.Take();
  g.Add({"g", "s", 0, 1}, ItemNumbered(98), GatheredAcks::kGatherFor, t0);
  EXPECT_TRUE(g.Due(t0));  // a call that slow gains nothing by waiting
}

}  // namespace
}  // namespace sqlgroup
