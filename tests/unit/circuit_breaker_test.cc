#include "member/circuit_breaker.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"

namespace sqlgroup {
namespace {

using State = CircuitBreaker::State;
using Admission = CircuitBreaker::Admission;

const absl::Time kT0 = absl::FromUnixSeconds(1000);
const absl::Status kDown = absl::UnavailableError("the endpoint answered 503");

// Fails `n` calls on items item0..item(n-1), each admitted; returns the last
// change.
std::optional<CircuitBreaker::Change> FailMany(CircuitBreaker& b, int n,
                                               absl::Time at) {
  std::optional<CircuitBreaker::Change> last;
  for (int i = 0; i < n; ++i) {
    EXPECT_NE(b.Admit(at), Admission::kDenied);
    if (auto c = b.Record(at, kDown, absl::StrCat("item", i))) last = c;
  }
  return last;
}

TEST(CircuitBreaker, OpensAfterOutageFailuresInARowOverSeveralItems) {
  CircuitBreaker b({});
  EXPECT_FALSE(FailMany(b, 4, kT0).has_value());
  EXPECT_EQ(b.state(kT0), State::kClosed);
  const auto opened = FailMany(b, 1, kT0);
  ASSERT_TRUE(opened.has_value());
  EXPECT_EQ(opened->to, State::kOpen);
  EXPECT_TRUE(opened->first);
  EXPECT_EQ(opened->open_until, kT0 + absl::Seconds(1));
  EXPECT_EQ(opened->error, "the endpoint answered 503");
  EXPECT_EQ(b.Admit(kT0 + absl::Milliseconds(999)), Admission::kDenied);
}

TEST(CircuitBreaker, OneItemFailingAgainAndAgainNeverOpensIt) {
  // A poison item is the item's problem: its retries are not an outage.
  CircuitBreaker b({});
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(b.Admit(kT0), Admission::kAdmitted);
    EXPECT_FALSE(b.Record(kT0, kDown, "poison").has_value());
  }
  EXPECT_EQ(b.state(kT0), State::kClosed);
}

TEST(CircuitBreaker, TheItemsOwnFailuresAndSuccessesResetTheCount) {
  CircuitBreaker b({});
  FailMany(b, 4, kT0);
  b.Record(kT0, absl::InternalError("retry: not yet"), "x");  // the item's
  EXPECT_FALSE(FailMany(b, 4, kT0).has_value());
  b.Record(kT0, absl::OkStatus(), "y");
  EXPECT_FALSE(FailMany(b, 4, kT0).has_value());
  EXPECT_EQ(b.state(kT0), State::kClosed);
}

TEST(CircuitBreaker, HalfOpenLetsOneProbeThroughAndItsOutcomeDecides) {
  CircuitBreaker b({});
  FailMany(b, 5, kT0);
  const absl::Time t1 = kT0 + absl::Seconds(1);
  EXPECT_EQ(b.state(t1), State::kHalfOpen);
  ASSERT_EQ(b.Admit(t1), Admission::kProbe);
  EXPECT_EQ(b.Admit(t1), Admission::kDenied);  // one at a time
  // It fails: twice as long now.
  const auto again = b.Record(t1, kDown, "item0");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->to, State::kOpen);
  EXPECT_FALSE(again->first);
  EXPECT_EQ(again->open_until, t1 + absl::Seconds(2));
  // The next probe succeeds: closed, and every call goes through.
  const absl::Time t2 = t1 + absl::Seconds(2);
  ASSERT_EQ(b.Admit(t2), Admission::kProbe);
  const auto closed = b.Record(t2, absl::OkStatus(), "item0");
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->to, State::kClosed);
  EXPECT_EQ(closed->was_open, absl::Seconds(3));
  EXPECT_EQ(b.Admit(t2), Admission::kAdmitted);
  EXPECT_EQ(b.Admit(t2), Admission::kAdmitted);
}

TEST(CircuitBreaker, SaysUntilWhenNoCallWouldBeAdmitted) {
  CircuitBreaker b({});
  EXPECT_EQ(b.NoCallBefore(kT0), absl::InfinitePast());
  FailMany(b, 5, kT0);
  EXPECT_EQ(b.NoCallBefore(kT0), kT0 + absl::Seconds(1));
  const absl::Time t1 = kT0 + absl::Seconds(1);
  EXPECT_EQ(b.NoCallBefore(t1), absl::InfinitePast());  // a probe may go
  ASSERT_EQ(b.Admit(t1), Admission::kProbe);
  EXPECT_EQ(b.NoCallBefore(t1), absl::InfiniteFuture());  // until it ends
  b.Record(t1, absl::OkStatus(), "item0");
  EXPECT_EQ(b.NoCallBefore(t1), absl::InfinitePast());
}

TEST(CircuitBreaker, ACutOffOrAnAbandonedProbeLetsAnotherProbe) {
  CircuitBreaker b({});
  FailMany(b, 5, kT0);
  const absl::Time t1 = kT0 + absl::Seconds(1);
  ASSERT_EQ(b.Admit(t1), Admission::kProbe);
  EXPECT_FALSE(b.Record(t1, absl::CancelledError("cut off"), "a"));
  ASSERT_EQ(b.Admit(t1), Admission::kProbe);
  b.Abandon();
  EXPECT_EQ(b.Admit(t1), Admission::kProbe);
}

TEST(CircuitBreaker, TheWaitDoublesUpToItsMaximum) {
  CircuitBreaker b({.trip_after = 2,
                    .first_wait = absl::Seconds(1),
                    .max_wait = absl::Seconds(5)});
  absl::Time t = kT0;
  FailMany(b, 2, t);
  std::vector<absl::Duration> waits;
  for (int i = 0; i < 5; ++i) {
    t = b.open_until();
    ASSERT_EQ(b.Admit(t), Admission::kProbe);
    const auto c = b.Record(t, kDown, "p");
    ASSERT_TRUE(c.has_value());
    waits.push_back(c->open_until - t);
  }
  EXPECT_EQ(waits, (std::vector<absl::Duration>{
                       absl::Seconds(2), absl::Seconds(4), absl::Seconds(5),
                       absl::Seconds(5), absl::Seconds(5)}));
}

// Random outcomes and times: at most one call is admitted while not
// closed and before it is recorded, none while open, and every admitted
// call when closed.
TEST(CircuitBreaker, RandomSequencesKeepItsPromises) {
  absl::BitGen gen;
  for (int round = 0; round < 200; ++round) {
    CircuitBreaker b({.trip_after = 3});
    absl::Time t = kT0;
    bool probe_out = false;
    for (int step = 0; step < 200; ++step) {
      t += absl::Milliseconds(absl::Uniform(gen, 0, 700));
      const State before = b.state(t);
      const bool admitted = b.Admit(t) != Admission::kDenied;
      // Closed: every call; open: none; half-open: one probe at a time.
      const bool expected = before == State::kClosed ||
                            (before == State::kHalfOpen && !probe_out);
      ASSERT_EQ(admitted, expected) << CircuitStateName(before);
      if (!admitted) continue;
      if (before == State::kHalfOpen) probe_out = true;
      const int pick = absl::Uniform(gen, 0, 3);
      const absl::Status s = pick == 0   ? absl::OkStatus()
                             : pick == 1 ? kDown
                                         : absl::InternalError("its own");
      b.Record(t, s, absl::StrCat("i", absl::Uniform(gen, 0, 4)));
      probe_out = false;
    }
  }
}

}  // namespace
}  // namespace sqlgroup
