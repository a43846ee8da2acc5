// SharedCommit: acks that share a commit, with threads and no database.
#include "member/shared_commit.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace sqlgroup {
namespace {

std::vector<store::TakeItem> Items(int first, int n) {
  std::vector<store::TakeItem> items;
  for (int i = first; i < first + n; ++i) {
    items.push_back({absl::StrCat("id", i), "s", i % 4, 1});
  }
  return items;
}

// A statement that deletes every item, and says how many each run held.
struct Recorder {
  absl::Mutex mu;
  std::vector<size_t> runs;
  SharedCommit::Run Run() {
    return [this](const std::vector<store::TakeItem>& items)
               -> absl::StatusOr<std::vector<std::string>> {
      std::vector<std::string> ids;
      for (const auto& item : items) ids.push_back(item.id);
      absl::MutexLock lock(&mu);
      runs.push_back(items.size());
      return ids;
    };
  }
};

// A first ack whose statement is held in flight, on a thread of its own,
// until Release(): the acks made meanwhile gather behind it.
class FirstInFlight {
 public:
  FirstInFlight(SharedCommit& commit, Recorder& rec)
      : thread_([this, &commit, &rec] {
          first_ = commit.Ack(Items(0, 1),
                              [&](const std::vector<store::TakeItem>& items)
                                  -> absl::StatusOr<std::vector<std::string>> {
                                in_flight_.Notify();
                                release_.WaitForNotification();
                                return rec.Run()(items);
                              });
        }) {
    in_flight_.WaitForNotification();
  }
  // Lets the statement end once the others had time to queue behind it.
  SharedCommit::Result Release() {
    absl::SleepFor(absl::Milliseconds(100));
    release_.Notify();
    thread_.join();
    return first_;
  }

 private:
  absl::Notification in_flight_, release_;
  SharedCommit::Result first_;
  std::thread thread_;
};

TEST(SharedCommit, AnAckWithNoCommitInFlightRunsAtOnceAlone) {
  SharedCommit commit;
  Recorder rec;
  const SharedCommit::Result r = commit.Ack(Items(0, 1), rec.Run());
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(r.deleted, 1);
  EXPECT_TRUE(r.led);
  EXPECT_EQ(r.shared_by, 1u);
  EXPECT_EQ(rec.runs, std::vector<size_t>{1});
}

// The first ack's statement is held in flight until five other workers
// wait: they share the next statement, led by one of them.
TEST(SharedCommit, AcksThatArriveDuringACommitShareTheNext) {
  SharedCommit commit;
  Recorder rec;
  FirstInFlight first(commit, rec);
  std::vector<std::thread> others;
  std::atomic<int> led{0};
  std::vector<SharedCommit::Result> results(5);
  for (int i = 0; i < 5; ++i) {
    others.emplace_back([&, i] {
      results[i] = commit.Ack(Items(10 + i, 1), rec.Run());
      if (results[i].led) ++led;
    });
  }
  EXPECT_EQ(first.Release().deleted, 1);
  for (auto& t : others) t.join();
  EXPECT_EQ(rec.runs, (std::vector<size_t>{1, 5}));
  EXPECT_EQ(led.load(), 1);
  for (const auto& r : results) {
    EXPECT_TRUE(r.status.ok());
    EXPECT_EQ(r.deleted, 1);
    EXPECT_EQ(r.shared_by, 5u);
  }
  EXPECT_EQ(commit.commits(), 2);
  EXPECT_EQ(commit.items(), 6);
}

TEST(SharedCommit, AStatementHoldsAtMostMaxItems) {
  SharedCommit commit;
  Recorder rec;
  FirstInFlight first(commit, rec);
  std::vector<std::thread> others;
  for (int i = 0; i < 3; ++i) {
    others.emplace_back(
        [&, i] { commit.Ack(Items(1000 * (i + 1), 100), rec.Run()); });
  }
  first.Release();
  for (auto& t : others) t.join();
  // 300 items waited: 200 fit in one statement (kMaxItems 256), 100 in
  // the next.
  ASSERT_EQ(rec.runs.size(), 3u);
  EXPECT_EQ(rec.runs[1], 200u);
  EXPECT_EQ(rec.runs[2], 100u);
}

// With two lines, a second ack runs beside the first.
TEST(SharedCommit, TwoLinesRunTwoStatementsSideBySide) {
  SharedCommit commit(/*max_in_flight=*/2);
  Recorder rec;
  FirstInFlight first(commit, rec);
  const SharedCommit::Result second = commit.Ack(Items(1, 1), rec.Run());
  EXPECT_TRUE(second.led);
  EXPECT_EQ(second.shared_by, 1u);
  first.Release();
  EXPECT_EQ(rec.runs, (std::vector<size_t>{1, 1}));
}

TEST(SharedCommit, EachAckCountsOnlyItsOwnDeletedItems) {
  SharedCommit commit;
  auto some = [](const std::vector<store::TakeItem>& items)
      -> absl::StatusOr<std::vector<std::string>> {
    return std::vector<std::string>{items[0].id, items[2].id};
  };
  const SharedCommit::Result r = commit.Ack(Items(0, 3), some);
  EXPECT_EQ(r.deleted, 2);
}

TEST(SharedCommit, TheStatementsErrorReachesEveryAckItHeld) {
  SharedCommit commit;
  Recorder rec;
  auto broken = [](const std::vector<store::TakeItem>&)
      -> absl::StatusOr<std::vector<std::string>> {
    return absl::UnavailableError("connection lost during ack");
  };
  FirstInFlight first(commit, rec);
  std::vector<SharedCommit::Result> results(3);
  std::vector<std::thread> others;
  for (int i = 0; i < 3; ++i) {
    others.emplace_back(
        [&, i] { results[i] = commit.Ack(Items(10 + i, 1), broken); });
  }
  first.Release();
  for (auto& t : others) t.join();
  int led = 0;
  for (const auto& r : results) {
    EXPECT_TRUE(absl::IsUnavailable(r.status)) << r.status;
    EXPECT_EQ(r.deleted, 0);
    led += r.led;
  }
  // Only the leader's connection broke.
  EXPECT_EQ(led, 1);
}

// Many workers acking as fast as they can: every ack gets its own result,
// and the statements hold more than one ack each.
TEST(SharedCommit, UnderLoadEveryAckIsSettledOnce) {
  SharedCommit commit;
  Recorder rec;
  constexpr int kThreads = 8, kAcks = 200;
  std::atomic<int64_t> deleted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAcks; ++i) {
        deleted += commit.Ack(Items(t * kAcks + i, 1), rec.Run()).deleted;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(deleted.load(), kThreads * kAcks);
  EXPECT_EQ(commit.items(), kThreads * kAcks);
  EXPECT_LE(commit.commits(), kThreads * kAcks);
}

}  // namespace
}  // namespace sqlgroup
