#include "member/part_scheduler.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <functional>
#include <set>
#include <thread>
#include <utility>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "key_placement.h"

namespace sqlgroup {
namespace {

constexpr absl::Duration kLong = absl::Hours(1);

store::ClaimRef Ref(int part, int64_t epoch) { return {"g", "s", part, epoch}; }

// New takes start idle: the next task is one probe for all of them; answer
// it with `due`.
void ProbeFindsWork(PartScheduler& s, const std::vector<int>& due) {
  const PartTask probe = s.Next();
  ASSERT_EQ(probe.kind, PartTask::Kind::kProbe);
  s.FinishProbe(due);
}

// Parts 0 and 1 of 2 (epochs 1 and 2), both found to have work.
void TwoPartsWithWork(PartScheduler& s) {
  s.Add(Ref(0, 1), PartRange(0, 2));
  s.Add(Ref(1, 2), PartRange(1, 2));
  ProbeFindsWork(s, {0, 1});
}

TEST(PartScheduler, NewTakesAreProbedTogetherNotClaimedOneByOne) {
  PartScheduler s(kLong, absl::ZeroDuration());
  for (int p = 0; p < 3; ++p) s.Add(Ref(p, p + 1), PartRange(p, 3));
  const PartTask probe = s.Next();
  ASSERT_EQ(probe.kind, PartTask::Kind::kProbe);
  EXPECT_EQ(probe.probe_parts, (std::vector<int>{0, 1, 2}));
  s.FinishProbe({1});
  const PartTask claim = s.Next();
  EXPECT_EQ(claim.kind, PartTask::Kind::kClaim);
  EXPECT_EQ(claim.ref.part, 1);
}

TEST(PartScheduler, OnlyItemsWithAHandlerMakeTheMemberBusy) {
  PartScheduler s(kLong, absl::ZeroDuration());
  s.Add(Ref(0, 1), PartRange(0, 1));
  const PartTask probe = s.Next();
  ASSERT_EQ(probe.kind, PartTask::Kind::kProbe);
  // A probe in flight only reads: a leave need not wait for it.
  EXPECT_FALSE(s.AnyBusy());
  s.FinishProbe({0});
  const PartTask claim = s.Next();
  ASSERT_EQ(claim.kind, PartTask::Kind::kClaim);
  EXPECT_TRUE(s.AnyBusy());
  EXPECT_TRUE(s.Busy(0));
}

TEST(PartScheduler, OwnedPartsAreServedRoundRobin) {
  PartScheduler s(kLong, absl::ZeroDuration());
  TwoPartsWithWork(s);
  PartTask a = s.Next();
  ASSERT_EQ(a.kind, PartTask::Kind::kClaim);
  EXPECT_EQ(a.ref.part, 0);
  s.FinishClaim(0, 1, /*found=*/true, a.range.first);
  EXPECT_EQ(s.Next().ref.part, 1);  // part 0 went to the back
}

// A batch that came with an ack while another part waited goes back with
// the part: its next claim task starts on it, from where it was read. A
// revoked part drops it (it is still in the table, for the next owner).
TEST(PartScheduler, ABatchClaimedWithAnAckWaitsForThePartsNextTurn) {
  PartScheduler s(kLong, absl::ZeroDuration());
  TwoPartsWithWork(s);
  const PartTask a = s.Next();
  ASSERT_EQ(a.ref.part, 0);
  const Uuid128 read_from = a.range.first + 100;
  Item claimed;
  claimed.id = FormatUuid(read_from + 1);
  const absl::Time claimed_at = absl::Now() - absl::Seconds(3);
  s.FinishClaim(0, 1, /*found=*/true, read_from, /*turn=*/2, {claimed},
                claimed_at);
  EXPECT_EQ(s.Next().ref.part, 1);  // the part waiting went first
  s.FinishClaim(1, 2, /*found=*/false, PartRange(1, 2).first);
  const PartTask again = s.Next();
  ASSERT_EQ(again.kind, PartTask::Kind::kClaim);
  ASSERT_EQ(again.ref.part, 0);
  EXPECT_EQ(again.cursor, read_from);
  EXPECT_EQ(again.turn, 2);
  ASSERT_EQ(again.claimed.size(), 1u);
  EXPECT_EQ(again.claimed[0].id, claimed.id);
  EXPECT_EQ(again.claimed_at, claimed_at);  // its age goes with it

  s.FinishClaim(0, 1, /*found=*/true, read_from, 0, {claimed});
  s.Revoke(0);
  s.Unrevoke(0);
  const PartTask after_revoke = s.Next();
  ASSERT_EQ(after_revoke.ref.part, 0);
  EXPECT_TRUE(after_revoke.claimed.empty());
  EXPECT_EQ(after_revoke.cursor, read_from);  // read again from there
}

TEST(PartScheduler, AWorkerKeepsItsPartOnlyWhileNothingElseWaits) {
  PartScheduler s(kLong, absl::ZeroDuration());
  TwoPartsWithWork(s);
  const PartTask a = s.Next();
  ASSERT_EQ(a.ref.part, 0);
  EXPECT_FALSE(s.KeepClaiming(0, 1)) << "part 1 waits for a worker";
  const PartTask b = s.Next();
  ASSERT_EQ(b.ref.part, 1);
  EXPECT_TRUE(s.KeepClaiming(0, 1));  // the queue is empty
  EXPECT_TRUE(s.Busy(0));             // and the part still the worker's
  EXPECT_FALSE(s.KeepClaiming(0, 2)) << "an old take";
  s.FinishClaim(1, 2, /*found=*/true, b.range.first);  // queued again
  EXPECT_FALSE(s.KeepClaiming(0, 1));
  s.Revoke(1);  // revoked while queued: it waits for no worker
  EXPECT_TRUE(s.KeepClaiming(0, 1));
  EXPECT_FALSE(s.KeepClaiming(1, 2)) << "a revoked part is handed back";
  s.Add(Ref(2, 3), PartRange(2, 3));  // a new take asks for a probe
  EXPECT_FALSE(s.KeepClaiming(0, 1)) << "a probe waits for a worker";
  s.Shutdown();
  EXPECT_FALSE(s.KeepClaiming(0, 1));
}

TEST(PartScheduler, AReTakenPartIsNeverHandedToASecondWorker) {
  PartScheduler s(kLong, absl::ZeroDuration());
  s.Add(Ref(3, 1), PartRange(3, 8));
  ProbeFindsWork(s, {3});
  const PartTask w1 = s.Next();  // worker 1 on take 1
  s.Remove(3);                   // dropped at the drain deadline
  EXPECT_TRUE(s.Busy(3));
  s.Add(Ref(3, 2), PartRange(3, 8));  // and taken back
  EXPECT_TRUE(s.ShouldYield(3, 1));
  std::atomic<bool> got{false};
  std::thread w2([&] {
    const PartTask t = s.Next();
    got = true;
    EXPECT_EQ(t.ref.epoch, 2);
    s.FinishClaim(3, 2, false, t.range.first);
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(got) << "take 2 handed out while take 1 is still in flight";
  s.FinishClaim(3, w1.ref.epoch, true, w1.range.first);
  w2.join();
  EXPECT_TRUE(got);
}

TEST(PartScheduler, ABatchStoppedEarlyResumesAtItsFirstUnhandledItem) {
  PartScheduler s(kLong, absl::ZeroDuration());
  s.Add(Ref(0, 7), PartRange(0, 1));
  ProbeFindsWork(s, {0});
  s.Revoke(0);
  s.Unrevoke(0);  // the revoke was undone while a batch was in flight
  const PartTask t = s.Next();
  const Uuid128 unhandled = t.range.first + 12345;
  s.FinishClaim(0, 7, true, unhandled);
  const PartTask again = s.Next();
  ASSERT_EQ(again.kind, PartTask::Kind::kClaim);
  EXPECT_EQ(again.cursor, unhandled);
}

TEST(PartScheduler, IdlePartsAreProbedAllTogetherOnAWakeUp) {
  PartScheduler s(kLong, absl::ZeroDuration());
  for (int p = 0; p < 3; ++p) s.Add(Ref(p, p + 1), PartRange(p, 3));
  ProbeFindsWork(s, {0, 1, 2});
  for (int p = 0; p < 3; ++p) {  // each claim finds nothing: idle again
    const PartTask t = s.Next();
    s.FinishClaim(t.ref.part, t.ref.epoch, /*found=*/false, t.range.first);
  }
  s.WakeIdle();
  const PartTask probe = s.Next();
  ASSERT_EQ(probe.kind, PartTask::Kind::kProbe);
  EXPECT_EQ(probe.probe_parts, (std::vector<int>{0, 1, 2}));
  s.FinishProbe({2});
  const PartTask next = s.Next();
  EXPECT_EQ(next.kind, PartTask::Kind::kClaim);
  EXPECT_EQ(next.ref.part, 2);
}

// Parts 0..2 of 3, each idle after a claim that found nothing.
void AllIdle(PartScheduler& s) {
  for (int p = 0; p < 3; ++p) s.Add(Ref(p, p + 1), PartRange(p, 3));
  ProbeFindsWork(s, {0, 1, 2});
  for (int p = 0; p < 3; ++p) {
    const PartTask t = s.Next();
    s.FinishClaim(t.ref.part, t.ref.epoch, /*found=*/false, t.range.first);
  }
}

TEST(PartScheduler, AnAnnouncementThatSaysWhereClaimsThosePartsWithoutAProbe) {
  PartScheduler s(kLong, absl::ZeroDuration());
  AllIdle(s);
  // One key in part 2, and a range that straddles parts 0 and 1.
  const Uuid128 in2 = PartStart(2, 3) + 5;
  s.WakeParts({{in2, in2}, {PartStart(1, 3) - 1, PartStart(1, 3)}});
  std::set<int> claimed;
  for (int n = 0; n < 3; ++n) {
    const PartTask t = s.Next(absl::Now() + absl::Milliseconds(50));
    ASSERT_EQ(t.kind, PartTask::Kind::kClaim) << "task " << n;
    EXPECT_NE(t.heard, absl::InfinitePast());
    claimed.insert(t.ref.part);
  }
  EXPECT_EQ(claimed, (std::set<int>{0, 1, 2}));
  // Nothing else: no probe of the idle parts followed.
  EXPECT_EQ(s.Next(absl::Now() + absl::Milliseconds(50)).kind,
            PartTask::Kind::kIdle);
}

TEST(PartScheduler, AnAnnouncementOfPartsOwnedElsewhereWakesNothing) {
  PartScheduler s(kLong, absl::ZeroDuration());
  s.Add(Ref(0, 1), PartRange(0, 2));
  ProbeFindsWork(s, {});
  const Uuid128 elsewhere = PartStart(1, 2) + 7;
  s.WakeParts({{elsewhere, elsewhere}});
  EXPECT_EQ(s.Next(absl::Now() + absl::Milliseconds(50)).kind,
            PartTask::Kind::kIdle);
}

TEST(PartScheduler, AnAnnouncementDuringAClaimClaimsThePartAgainAfterIt) {
  PartScheduler s(kLong, absl::ZeroDuration());
  AllIdle(s);
  s.WakeParts({PartRange(1, 3)});
  const PartTask claim = s.Next();
  ASSERT_EQ(claim.kind, PartTask::Kind::kClaim);
  // More items come while the claim reads (it may have read before their
  // commit): the claim finds nothing, and the part is claimed once more.
  s.WakeParts({PartRange(1, 3)});
  s.FinishClaim(1, claim.ref.epoch, /*found=*/false, claim.range.first);
  const PartTask again = s.Next(absl::Now() + absl::Milliseconds(50));
  ASSERT_EQ(again.kind, PartTask::Kind::kClaim);
  EXPECT_EQ(again.ref.part, 1);
  s.FinishClaim(1, again.ref.epoch, /*found=*/false, again.range.first);
  // Then idle: the announcement asked for one claim after it, not a loop.
  EXPECT_EQ(s.Next(absl::Now() + absl::Milliseconds(50)).kind,
            PartTask::Kind::kIdle);
}

TEST(PartScheduler, ProbesAndTheirClaimsCarryWhenTheAnnouncementWasHeard) {
  PartScheduler s(kLong, absl::ZeroDuration());
  AllIdle(s);
  const absl::Time before = absl::Now();
  s.WakeIdle();
  const PartTask probe = s.Next();
  ASSERT_EQ(probe.kind, PartTask::Kind::kProbe);
  EXPECT_GE(probe.heard, before);
  s.FinishProbe({2}, probe.heard);
  const PartTask claim = s.Next();
  ASSERT_EQ(claim.kind, PartTask::Kind::kClaim);
  EXPECT_EQ(claim.heard, probe.heard);
}

TEST(PartScheduler, LagIsMeasuredForEveryOwnedPartWhenDue) {
  PartScheduler s(kLong, absl::Milliseconds(20));
  TwoPartsWithWork(s);
  s.Next();                       // part 0, in flight
  s.Next();                       // part 1, in flight
  const PartTask lag = s.Next();  // waits for the interval
  ASSERT_EQ(lag.kind, PartTask::Kind::kMeasureLag);
  EXPECT_EQ(lag.probe_parts, (std::vector<int>{0, 1}));
}

TEST(PartScheduler, TheGroupsReporterMeasuresWithoutPartsAndOnlyIt) {
  PartScheduler s(kLong, absl::Milliseconds(20));
  s.Add(Ref(0, 1), PartRange(0, 2));
  ProbeFindsWork(s, {});
  const PartTask lag = s.Next();
  ASSERT_EQ(lag.kind, PartTask::Kind::kMeasureLag);
  EXPECT_FALSE(lag.group_facts);
  s.FinishLag();
  // The reporter of a group with more members than parts may own none: it
  // still measures the group (and no part).
  s.Remove(0);
  s.ReportGroup(true);
  const PartTask facts = s.Next();
  ASSERT_EQ(facts.kind, PartTask::Kind::kMeasureLag);
  EXPECT_TRUE(facts.group_facts);
  EXPECT_TRUE(facts.probe_parts.empty());
  s.FinishLag();
  // Not the reporter, no parts: nothing to do until told otherwise.
  s.ReportGroup(false);
  EXPECT_EQ(s.Next(absl::Now() + absl::Milliseconds(100)).kind,
            PartTask::Kind::kIdle);
}

// CPU time a thread has used, read from outside it.
absl::Duration ThreadCpu(std::thread& t) {
  clockid_t clock;
  pthread_getcpuclockid(t.native_handle(), &clock);
  timespec ts;
  clock_gettime(clock, &ts);
  return absl::DurationFromTimespec(ts);
}

TEST(PartScheduler, AWorkerWithNothingToDoSleepsInsteadOfSpinning) {
  // Probes would be due every millisecond, but the only part is in flight,
  // so there is nothing to probe and nothing else to do.
  PartScheduler s(absl::Milliseconds(1), absl::ZeroDuration());
  s.Add(Ref(0, 1), PartRange(0, 1));
  ProbeFindsWork(s, {0});
  s.Next();
  std::thread idle([&] { EXPECT_EQ(s.Next().kind, PartTask::Kind::kStop); });
  absl::SleepFor(absl::Milliseconds(20));
  const absl::Duration before = ThreadCpu(idle);
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Duration used = ThreadCpu(idle) - before;
  s.Shutdown();
  idle.join();
  EXPECT_LT(used, absl::Milliseconds(30));
}

// Runs Next() on another thread: whether it hands out a probe within `wait`;
// `then` runs after `first_wait` without one (e.g. a NOTIFY). Shuts `s` down.
bool ProbedWithin(PartScheduler& s, absl::Duration first_wait,
                  const std::function<void()>& then, absl::Duration wait) {
  absl::Notification probed;
  std::thread worker([&] {
    if (s.Next().kind == PartTask::Kind::kProbe) probed.Notify();
  });
  bool early = probed.WaitForNotificationWithTimeout(first_wait);
  bool got = early;
  if (!early) {
    if (then) then();
    got = probed.WaitForNotificationWithTimeout(wait);
  }
  s.Shutdown();
  worker.join();
  return got && !(then && early);
}

TEST(PartScheduler, AListeningMemberWithoutWorkProbesRarelyAndWakesOnNotify) {
  PartScheduler s(absl::Milliseconds(5), absl::ZeroDuration(), kLong,
                  absl::Milliseconds(1));
  s.SetListening(true);
  s.Add(Ref(0, 1), PartRange(0, 1));
  ProbeFindsWork(s, {});  // the first probe comes at once, and finds nothing
  // No probe every 5 ms now; a producer's NOTIFY brings one at once.
  EXPECT_TRUE(ProbedWithin(
      s, absl::Milliseconds(200), [&] { s.WakeIdle(); }, absl::Seconds(5)));
}

TEST(PartScheduler, AnExpectedDueTimeBringsAProbeThenNotBefore) {
  PartScheduler s(kLong, absl::ZeroDuration(), kLong, absl::Milliseconds(1));
  s.SetListening(true);
  s.Add(Ref(0, 1), PartRange(0, 1));
  ProbeFindsWork(s, {});
  // A worker already waits, with no deadline, when the due time is set.
  absl::Notification probed;
  absl::Time probed_at;
  std::thread worker([&] {
    if (s.Next().kind == PartTask::Kind::kProbe) {
      probed_at = absl::Now();
      probed.Notify();
    }
  });
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time due = absl::Now() + absl::Milliseconds(150);
  s.ExpectAt(due);
  const bool got = probed.WaitForNotificationWithTimeout(absl::Seconds(5));
  s.Shutdown();
  worker.join();
  ASSERT_TRUE(got);
  EXPECT_GE(probed_at, due);
}

TEST(PartScheduler, DueTimesCloseTogetherShareOneProbeAtTheLaterOne) {
  PartScheduler s(kLong, absl::ZeroDuration(), kLong, absl::Milliseconds(1));
  s.SetListening(true);
  s.Add(Ref(0, 1), PartRange(0, 1));
  ProbeFindsWork(s, {});
  const absl::Time first = absl::Now() + absl::Milliseconds(100);
  s.ExpectAt(first);
  s.ExpectAt(first + absl::Milliseconds(60));  // e.g. a retry's jitter
  const PartTask probe = s.Next();
  ASSERT_EQ(probe.kind, PartTask::Kind::kProbe);
  EXPECT_GE(absl::Now(), first + absl::Milliseconds(60));
  s.FinishProbe({});
  // Nothing else was due: no second probe.
  EXPECT_FALSE(
      ProbedWithin(s, absl::Milliseconds(300), nullptr, absl::ZeroDuration()));
}

TEST(PartScheduler,
     WithoutNotifyOrAfterRecentWorkIdlePartsAreProbedEveryIdlePoll) {
  {
    PartScheduler polling(absl::Milliseconds(5), absl::ZeroDuration(), kLong,
                          kLong);
    polling.Add(Ref(0, 1), PartRange(0, 1));
    ProbeFindsWork(polling, {});
    EXPECT_TRUE(
        ProbedWithin(polling, absl::Seconds(5), nullptr, absl::ZeroDuration()));
  }
  {
    // Listening, but a claim found items a moment ago: retries with a
    // backoff may come due without a NOTIFY, so the short poll holds.
    PartScheduler warm(absl::Milliseconds(5), absl::ZeroDuration(), kLong,
                       kLong);
    warm.SetListening(true);
    warm.Add(Ref(0, 1), PartRange(0, 1));
    ProbeFindsWork(warm, {0});
    const PartTask claim = warm.Next();
    ASSERT_EQ(claim.kind, PartTask::Kind::kClaim);
    warm.FinishClaim(0, 1, /*found=*/true, claim.range.first);
    const PartTask again = warm.Next();
    ASSERT_EQ(again.kind, PartTask::Kind::kClaim);
    warm.FinishClaim(0, 1, /*found=*/false, again.range.first);
    EXPECT_TRUE(
        ProbedWithin(warm, absl::Seconds(5), nullptr, absl::ZeroDuration()));
  }
}

// A cold member turned warm by an announcement of where its items are:
// the announced part's claim goes out first, and the short poll of the idle
// parts starts an idle_poll later, not at once beside that claim (where it
// took the only warm connection from it: bench/RESULTS.md, session 20),
// also for a worker that was already waiting on the rare poll's deadline.
TEST(PartScheduler, AnAnnouncementToAColdMemberIsClaimedBeforeAnyProbe) {
  const absl::Duration idle_poll = absl::Seconds(1);
  PartScheduler s(idle_poll, absl::ZeroDuration(), kLong, absl::Seconds(30));
  s.SetListening(true);
  s.Add(Ref(0, 1), PartRange(0, 2));
  s.Add(Ref(1, 1), PartRange(1, 2));
  ProbeFindsWork(s, {});
  absl::SleepFor(idle_poll + absl::Milliseconds(100));  // past a short poll
  absl::Mutex mu;
  std::vector<std::pair<PartTask, absl::Time>> got;
  auto worker = [&] {
    PartTask task = s.Next();
    absl::MutexLock lock(&mu);
    got.emplace_back(std::move(task), absl::Now());
  };
  std::thread a(worker), b(worker);  // both wait for the rare poll
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Time warmed = absl::Now();
  s.WakeParts({PartRange(0, 2)});
  {
    absl::MutexLock lock(&mu);
    mu.AwaitWithTimeout(
        absl::Condition(
            +[](std::vector<std::pair<PartTask, absl::Time>>* g) {
              return g->size() == 2;
            },
            &got),
        absl::Seconds(10));
  }
  s.Shutdown();  // (a worker still waiting gets kStop)
  a.join();
  b.join();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first.kind, PartTask::Kind::kClaim);
  EXPECT_EQ(got[0].first.ref.part, 0);
  ASSERT_EQ(got[1].first.kind, PartTask::Kind::kProbe);
  EXPECT_EQ(got[1].first.probe_parts, std::vector<int>{1});
  EXPECT_GE(got[1].second, warmed + idle_poll);
}

// Warm spells that end before their first short poll do not put off the
// rare poll of a cold member: idle parts are still probed every
// idle_poll_listening at the least.
TEST(PartScheduler, BriefWarmSpellsDoNotPutOffTheRarePoll) {
  PartScheduler s(absl::Milliseconds(400), absl::ZeroDuration(),
                  absl::Milliseconds(600), absl::Milliseconds(20));
  s.SetListening(true);
  s.Add(Ref(0, 1), PartRange(0, 2));
  s.Add(Ref(1, 1), PartRange(1, 2));
  ProbeFindsWork(s, {});
  const absl::Time start = absl::Now();
  bool probed = false;
  while (!probed && absl::Now() < start + absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(50));  // cold again by now
    s.WakeParts({PartRange(0, 2)});
    const PartTask task = s.Next();
    if (task.kind == PartTask::Kind::kProbe) {
      probed = true;
    } else {
      ASSERT_EQ(task.kind, PartTask::Kind::kClaim);
      s.FinishClaim(0, 1, /*found=*/false, task.range.first);
    }
  }
  EXPECT_TRUE(probed);
  EXPECT_LT(absl::Now(), start + absl::Seconds(2));
}

TEST(PartScheduler, AnAlwaysBusyPartDoesNotHoldBackTheProbeOfIdleOnes) {
  PartScheduler s(absl::Milliseconds(5), absl::ZeroDuration());
  s.Add(Ref(0, 1), PartRange(0, 2));
  s.Add(Ref(1, 1), PartRange(1, 2));
  ProbeFindsWork(s, {0});  // part 1 has nothing yet
  bool probed = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!probed && absl::Now() < deadline) {
    const PartTask task = s.Next();
    if (task.kind == PartTask::Kind::kProbe) {
      EXPECT_EQ(task.probe_parts, std::vector<int>{1});
      probed = true;
    } else {
      ASSERT_EQ(task.ref.part, 0);
      absl::SleepFor(absl::Milliseconds(1));  // a batch of part 0
      s.FinishClaim(0, 1, /*found=*/true, task.range.first);
    }
  }
  EXPECT_TRUE(probed);
}

// Per-key order with single items: claims offer heads, workers take them.

// An item of key block `block` (its id's top 64 bits), at `time`.
Item ItemOf(uint64_t block, uint64_t time = 1) {
  Item item;
  item.id = FormatUuid(KeyedItemId(block, time, 0));
  return item;
}

// A part with one claim out (per-key order), as after a probe found work.
PartTask ClaimOut(PartScheduler& s, int part = 0, int64_t epoch = 1) {
  s.Add(Ref(part, epoch), PartRange(part, 1));
  ProbeFindsWork(s, {part});
  const PartTask claim = s.Next();
  EXPECT_EQ(claim.kind, PartTask::Kind::kClaim);
  return claim;
}

TEST(PartScheduler, OfferedKeysOfOnePartGoToSeveralWorkersAtOnce) {
  PartScheduler s(kLong, absl::ZeroDuration());
  const PartTask claim = ClaimOut(s);
  const absl::Time claimed_at = absl::Now() - absl::Seconds(3);
  EXPECT_EQ(s.Offer(0, 1, claim.finished, {ItemOf(10), ItemOf(11), ItemOf(12)},
                    claim.range.first, claimed_at),
            3u);
  std::set<std::string> handed;
  for (int i = 0; i < 3; ++i) {
    const PartTask t = s.Next();
    ASSERT_EQ(t.kind, PartTask::Kind::kItem);
    EXPECT_EQ(t.claimed_at, claimed_at);  // read again if it waited long
    handed.insert(t.item.id);
  }
  EXPECT_EQ(handed.size(), 3u);  // three workers hold part 0 together
  EXPECT_TRUE(s.Busy(0));
  // With all three out, the sweep goes on: a claim for further keys.
  EXPECT_EQ(s.Next().kind, PartTask::Kind::kClaim);
}

TEST(PartScheduler, AKeyWithAWorkerIsNeverOfferedAgain) {
  PartScheduler s(kLong, absl::ZeroDuration());
  PartTask claim = ClaimOut(s);
  ASSERT_EQ(s.Offer(0, 1, claim.finished, {ItemOf(10)}, claim.range.first), 1u);
  const PartTask item = s.Next();
  ASSERT_EQ(item.kind, PartTask::Kind::kItem);
  claim = s.Next();
  ASSERT_EQ(claim.kind, PartTask::Kind::kClaim);
  // The claim read the head that is with a handler, and a new key.
  EXPECT_EQ(s.Offer(0, 1, claim.finished, {ItemOf(10), ItemOf(20)},
                    claim.range.first),
            1u);
  EXPECT_EQ(s.Next().item.id, ItemOf(20).id);
}

// A slow key holds up only itself: while its item is with a handler, the
// part is probed for items of its other keys that fall due (a retry, a
// delayed item), and a probe that finds them brings a claim. (Before, the
// part was probed only once the slow item was done: a retry released by
// the part's previous owner waited a 60 s handler out.)
TEST(PartScheduler, ItemsFallingDueWhileAnotherKeyRunsAreProbedFor) {
  PartScheduler s(kLong, absl::ZeroDuration());
  PartTask claim = ClaimOut(s);
  ASSERT_EQ(s.Offer(0, 1, claim.finished, {ItemOf(10)}, claim.range.first), 1u);
  ASSERT_EQ(s.Next().kind, PartTask::Kind::kItem);  // key 10, slow
  claim = s.Next();  // the sweep goes on past key 10
  ASSERT_EQ(claim.kind, PartTask::Kind::kClaim);
  s.FinishClaim(0, 1, /*found=*/false, claim.range.first);  // none due yet
  EXPECT_TRUE(s.Busy(0));
  s.ExpectAt(absl::Now());  // key 20's retry falls due
  const PartTask probe = s.Next(absl::Now() + absl::Seconds(5));
  ASSERT_EQ(probe.kind, PartTask::Kind::kProbe);
  EXPECT_EQ(probe.probe_parts, std::vector<int>{0});
  s.FinishProbe({0});
  EXPECT_EQ(s.Next(absl::Now() + absl::Seconds(5)).kind,
            PartTask::Kind::kClaim);
}

// The circuit breaker's gate: while it is closed, claims wait in the
// rotation (probes still run); once it opens (GateChanged), they go out.
TEST(PartScheduler, AClosedGateHoldsBackClaimsButNotProbes) {
  PartScheduler s(kLong, absl::ZeroDuration());
  std::atomic<bool> closed{true};
  s.SetGate([&](absl::Time) {
    return closed ? absl::InfiniteFuture() : absl::InfinitePast();
  });
  TwoPartsWithWork(s);  // the probe went out through the closed gate
  EXPECT_EQ(s.Next(absl::Now() + absl::Milliseconds(50)).kind,
            PartTask::Kind::kIdle);
  closed = false;
  s.GateChanged();
  EXPECT_EQ(s.Next(absl::Now() + absl::Seconds(5)).kind,
            PartTask::Kind::kClaim);
}

TEST(PartScheduler, AHeadReadBeforeItsKeyFinishedIsNotHandedOutAgain) {
  PartScheduler s(kLong, absl::ZeroDuration());
  PartTask claim = ClaimOut(s);
  ASSERT_EQ(s.Offer(0, 1, claim.finished, {ItemOf(10)}, claim.range.first), 1u);
  const PartTask item = s.Next();
  claim = s.Next();  // reads the table while item 10 is being acknowledged
  s.FinishItem(0, 1, item.item, true);
  // Its read saw the acknowledged item still there: it must not go out.
  EXPECT_EQ(s.Offer(0, 1, claim.finished, {ItemOf(10)}, claim.range.first), 0u);
  // A claim handed out after the finish may offer the key's next item.
  claim = s.Next();
  ASSERT_EQ(claim.kind, PartTask::Kind::kClaim);
  EXPECT_EQ(s.Offer(0, 1, claim.finished, {ItemOf(10, 2)}, claim.range.first),
            1u);
}

TEST(PartScheduler, ARevokedPartDropsItsOfferedItemsAndWaitsForItsWorkers) {
  PartScheduler s(kLong, absl::ZeroDuration());
  const PartTask claim = ClaimOut(s);
  ASSERT_EQ(s.Offer(0, 1, claim.finished, {ItemOf(1), ItemOf(2), ItemOf(3)},
                    claim.range.first),
            3u);
  const PartTask item = s.Next();
  s.Revoke(0);
  EXPECT_TRUE(s.Busy(0));  // one item is with a handler
  s.FinishItem(0, 1, item.item, true);
  EXPECT_FALSE(s.Busy(0));  // the two not started stay in the table
  s.Unrevoke(0);
  EXPECT_EQ(s.Next().kind, PartTask::Kind::kClaim);
}

TEST(PartScheduler, APartWhoseItemAckBrokeRestsWhicheverWorkerComesNext) {
  // A short poll: without the rest the part would be probed within 20 ms.
  PartScheduler s(absl::Milliseconds(20), absl::ZeroDuration());
  const PartTask claim = ClaimOut(s);
  ASSERT_EQ(s.Offer(0, 1, claim.finished, {ItemOf(10)}, claim.range.first), 1u);
  const PartTask item = s.Next();
  ASSERT_EQ(item.kind, PartTask::Kind::kItem);
  s.FinishItem(0, 1, item.item, /*again=*/false);
  // The first rest is 80-120 ms, and the next probe comes after it.
  const absl::Time broke = absl::Now();
  const PartTask probe = s.Next();
  EXPECT_EQ(probe.kind, PartTask::Kind::kProbe);
  EXPECT_GE(absl::Now() - broke, absl::Milliseconds(75));
  EXPECT_EQ(probe.probe_parts, (std::vector<int>{0}));
}

// Acks gathered by one worker (GatheredAcks) finish together: their keys
// stay busy until then, and a commit that broke rests the part once, not
// once per item (eight items' rests in a row would be the 5 s maximum).
TEST(PartScheduler, ItemsFinishedTogetherFreeTheirKeysAndRestThePartOnce) {
  PartScheduler s(absl::Milliseconds(20), absl::ZeroDuration());
  const PartTask claim = ClaimOut(s);
  std::vector<Item> offered;
  for (int key = 1; key <= 8; ++key) offered.push_back(ItemOf(key * 10));
  ASSERT_EQ(s.Offer(0, 1, claim.finished, offered, claim.range.first), 8u);
  std::vector<Item> handled;
  for (int i = 0; i < 8; ++i) {
    const PartTask item = s.Next();
    ASSERT_EQ(item.kind, PartTask::Kind::kItem);
    handled.push_back(item.item);
  }
  EXPECT_TRUE(s.Busy(0));
  // A claim that read meanwhile may not offer them again.
  const PartTask again = s.Next();
  ASSERT_EQ(again.kind, PartTask::Kind::kClaim);
  s.FinishClaim(0, 1, /*found=*/false, again.range.first);
  s.FinishItems(0, 1, handled, /*again=*/false);
  EXPECT_FALSE(s.Busy(0));
  const absl::Time broke = absl::Now();
  const PartTask probe = s.Next();
  EXPECT_EQ(probe.kind, PartTask::Kind::kProbe);
  EXPECT_GE(absl::Now() - broke, absl::Milliseconds(75));
  EXPECT_LT(absl::Now() - broke, absl::Milliseconds(1000));
}

}  // namespace
}  // namespace sqlgroup
