// SharedCommit: acks that share a commit, with threads and no database.
#include "member/shared_commit.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace sqlgroup {
namespace {

std::vector<store::TakeItem> Items(int first, int n, int64_t epoch = 1) {
  std::vector<store::TakeItem> items;
  for (int i = first; i < first + n; ++i) {
    items.push_back({absl::StrCat("id", i), "s", i % 4, epoch});
  }
  return items;
}

// A statement that deletes every item, and says how many each run held.
struct Recorder {
  absl::Mutex mu;
  std::vector<size_t> runs;
  SharedCommit::Run Run() {
    return [this](const std::vector<store::TakeItem>& items)
               -> absl::StatusOr<std::vector<bool>> {
      absl::MutexLock lock(&mu);
      runs.push_back(items.size());
      return std::vector<bool>(items.size(), true);
    };
  }
  std::vector<size_t> Runs() {
    absl::MutexLock lock(&mu);
    return runs;
  }
};

// Waits until `n` acks wait for a statement (they have queued).
void AwaitWaiting(const SharedCommit& commit, size_t n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (commit.waiting() < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(commit.waiting(), n);
}

// A first ack whose statement is held in flight, on a thread of its own,
// until Release(): the acks made meanwhile gather behind it.
class FirstInFlight {
 public:
  FirstInFlight(SharedCommit& commit, Recorder& rec)
      : thread_([this, &commit, &rec] {
          first_ = commit.Ack(Items(0, 1),
                              [&](const std::vector<store::TakeItem>& items)
                                  -> absl::StatusOr<std::vector<bool>> {
                                in_flight_.Notify();
                                release_.WaitForNotification();
                                return rec.Run()(items);
                              });
        }) {
    in_flight_.WaitForNotification();
  }
  SharedCommit::Result Release() {
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
  EXPECT_EQ(rec.Runs(), std::vector<size_t>{1});
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
  AwaitWaiting(commit, 5);
  EXPECT_EQ(first.Release().deleted, 1);
  for (auto& t : others) t.join();
  EXPECT_EQ(rec.Runs(), (std::vector<size_t>{1, 5}));
  EXPECT_EQ(led.load(), 1);
  for (const auto& r : results) {
    EXPECT_TRUE(r.status.ok());
    EXPECT_EQ(r.deleted, 1);
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
  AwaitWaiting(commit, 3);
  first.Release();
  for (auto& t : others) t.join();
  // 300 items waited: 200 fit in one statement (kMaxItems 256), 100 in
  // the next.
  EXPECT_EQ(rec.Runs(), (std::vector<size_t>{1, 200, 100}));
}

// With two lines, a second ack runs beside the first.
TEST(SharedCommit, TwoLinesRunTwoStatementsSideBySide) {
  SharedCommit commit(/*max_in_flight=*/2);
  Recorder rec;
  FirstInFlight first(commit, rec);
  const SharedCommit::Result second = commit.Ack(Items(1, 1), rec.Run());
  EXPECT_TRUE(second.led);
  first.Release();
  EXPECT_EQ(rec.Runs(), (std::vector<size_t>{1, 1}));
}

// The statement says which places it deleted: one id under an old take and
// under the live one (a part taken again) is credited to the live take's
// ack only.
TEST(SharedCommit, EachAckGetsTheAnswersOfItsOwnPlaces) {
  SharedCommit commit;
  Recorder rec;
  FirstInFlight first(commit, rec);
  auto live_only = [](const std::vector<store::TakeItem>& items)
      -> absl::StatusOr<std::vector<bool>> {
    std::vector<bool> deleted;
    for (const auto& item : items) deleted.push_back(item.epoch == 2);
    return deleted;
  };
  SharedCommit::Result stale, live;
  std::thread a(
      [&] { stale = commit.Ack(Items(7, 1, /*epoch=*/1), live_only); });
  AwaitWaiting(commit, 1);
  std::thread b(
      [&] { live = commit.Ack(Items(7, 1, /*epoch=*/2), live_only); });
  AwaitWaiting(commit, 2);
  first.Release();
  a.join();
  b.join();
  EXPECT_EQ(stale.deleted, 0);
  EXPECT_EQ(live.deleted, 1);
}

TEST(SharedCommit, TheStatementsErrorReachesEveryAckItHeld) {
  SharedCommit commit;
  Recorder rec;
  auto broken = [](const std::vector<store::TakeItem>&)
      -> absl::StatusOr<std::vector<bool>> {
    return absl::UnavailableError("connection lost during ack");
  };
  FirstInFlight first(commit, rec);
  std::vector<SharedCommit::Result> results(3);
  std::vector<std::thread> others;
  for (int i = 0; i < 3; ++i) {
    others.emplace_back(
        [&, i] { results[i] = commit.Ack(Items(10 + i, 1), broken); });
  }
  AwaitWaiting(commit, 3);
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

// Many workers acking as fast as a 1 ms statement allows: every ack gets
// its own result, and statements hold several acks.
TEST(SharedCommit, UnderLoadEveryAckIsSettledOnceAndStatementsAreShared) {
  SharedCommit commit;
  constexpr int kThreads = 8, kAcks = 50;
  auto slow = [](const std::vector<store::TakeItem>& items)
      -> absl::StatusOr<std::vector<bool>> {
    absl::SleepFor(absl::Milliseconds(1));
    return std::vector<bool>(items.size(), true);
  };
  std::atomic<int64_t> deleted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAcks; ++i) {
        deleted += commit.Ack(Items(t * kAcks + i, 1), slow).deleted;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(deleted.load(), kThreads * kAcks);
  EXPECT_EQ(commit.items(), kThreads * kAcks);
  // Eight workers behind a 1 ms statement: about 8 acks a statement.
  EXPECT_LT(commit.commits(), kThreads * kAcks / 2);
}

}  // namespace
}  // namespace sqlgroup
