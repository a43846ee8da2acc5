// The retry policy, pure: the default backoff rides out an hour's outage
// (the table in docs/HANDLERS.md, computed from BackoffBase), the jitter
// stays in its bounds, a handler's Retry-After stretches a wait up to
// backoff_max only, Validate() names the field, and failed attempts are
// logged at most once per part per interval.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "member/backoff.h"
#include "member/failure_log.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/item.h"

namespace sqlgroup {
namespace {

using ::testing::HasSubstr;

// The wait after failed attempt n (1-based), before jitter, for the
// default options: the "delay" column of docs/HANDLERS.md, in seconds.
constexpr int64_t kDocumentedDelays[] = {
    1,   2,   4,   8,   16,  32,  64,  128, 256, 512, 600, 600,
    600, 600, 600, 600, 600, 600, 600, 600, 600, 600, 600, 600};

TEST(RetryPolicy, DefaultDelaysAreTheDocumentedTable) {
  const ConsumerOptions o;
  ASSERT_EQ(o.max_attempts, 25);
  // Attempt max_attempts dead-letters: the waits come after 1..24.
  ASSERT_EQ(std::size(kDocumentedDelays),
            static_cast<size_t>(o.max_attempts - 1));
  for (int n = 1; n < o.max_attempts; ++n) {
    EXPECT_EQ(BackoffBase(n, o.backoff_initial, o.backoff_max),
              absl::Seconds(kDocumentedDelays[n - 1]))
        << "after attempt " << n;
  }
}

TEST(RetryPolicy, DefaultPolicySpansMoreThanAnHourBeforeTheDeadLetter) {
  const ConsumerOptions o;
  absl::Duration total;
  for (int n = 1; n < o.max_attempts; ++n) {
    total += BackoffBase(n, o.backoff_initial, o.backoff_max);
  }
  // Documented: 9,423 s (2 h 37 min 3 s) from the first failure to the
  // last attempt, 7,538.4 s (2 h 5 min 38 s) at the low edge of the
  // jitter, 11,307.6 s at the high one.
  EXPECT_EQ(total, absl::Seconds(9423));
  EXPECT_NEAR(absl::ToDoubleSeconds(total * kBackoffJitterLow), 7538.4, 1e-3);
  EXPECT_NEAR(absl::ToDoubleSeconds(total * kBackoffJitterHigh), 11307.6, 1e-3);
  EXPECT_GE(total * kBackoffJitterLow, absl::Hours(2));
  // Handler time comes on top: the span is at least the waits.
}

TEST(RetryPolicy, TheDefaultWaitIsCappedAtTenMinutesFromTheEleventhAttempt) {
  const ConsumerOptions o;
  EXPECT_EQ(BackoffBase(10, o.backoff_initial, o.backoff_max),
            absl::Seconds(512));
  EXPECT_EQ(BackoffBase(11, o.backoff_initial, o.backoff_max),
            absl::Minutes(10));
  // Far past the cap the doubling stops (no overflow).
  EXPECT_EQ(BackoffBase(10000, o.backoff_initial, o.backoff_max),
            absl::Minutes(10));
}

TEST(RetryPolicy, JitterStaysWithinTwentyPercentOfTheBase) {
  const absl::Duration initial = absl::Seconds(1), max = absl::Minutes(10);
  for (int n = 1; n <= 30; ++n) {
    const absl::Duration base = BackoffBase(n, initial, max);
    for (int i = 0; i < 200; ++i) {
      const absl::Duration d = Backoff(n, initial, max);
      EXPECT_GE(d, base * 0.8) << n;
      EXPECT_LE(d, base * 1.2) << n;
    }
  }
}

TEST(RetryPolicy, RetryAfterWaitsLongerThanTheBackoffButNoLongerThanTheMax) {
  const absl::Duration max = absl::Seconds(30);
  // Asked for more than the backoff: the ask.
  EXPECT_EQ(NextTryDelay(absl::Seconds(1), absl::Seconds(2), max),
            absl::Seconds(2));
  // Asked for less: the backoff, never sooner.
  EXPECT_EQ(NextTryDelay(absl::Seconds(8), absl::Seconds(2), max),
            absl::Seconds(8));
  EXPECT_EQ(NextTryDelay(absl::Seconds(1), absl::ZeroDuration(), max),
            absl::Seconds(1));
  // Asked for more than the max: the max.
  EXPECT_EQ(NextTryDelay(absl::Seconds(1), absl::Hours(3), max), max);
  EXPECT_EQ(NextTryDelay(absl::Seconds(1), absl::InfiniteDuration(), max), max);
}

TEST(RetryPolicy, RetryAfterVerdictCarriesItsWait) {
  const absl::Status s = RetryAfterVerdict(absl::Seconds(2), "busy");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "busy");
  EXPECT_FALSE(IsDeadLetterVerdict(s));
  EXPECT_EQ(RetryAfterOf(s), absl::Seconds(2));
  EXPECT_EQ(RetryAfterOf(RetryAfterVerdict(absl::Milliseconds(1500), "x")),
            absl::Milliseconds(1500));
  EXPECT_EQ(RetryAfterOf(RetryAfterVerdict(-absl::Seconds(1), "x")),
            absl::ZeroDuration());
  // Copied payloads keep it (as a handler that rewrites the message does).
  absl::Status copy(s.code(), "POST http://x: busy");
  s.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    copy.SetPayload(url, payload);
  });
  EXPECT_EQ(RetryAfterOf(copy), absl::Seconds(2));
  // Other statuses ask for nothing.
  EXPECT_EQ(RetryAfterOf(absl::OkStatus()), std::nullopt);
  EXPECT_EQ(RetryAfterOf(absl::UnavailableError("busy")), std::nullopt);
  EXPECT_EQ(RetryAfterOf(DeadLetterVerdict("never")), std::nullopt);
}

ConsumerOptions Valid() {
  ConsumerOptions o;
  o.group = "g";
  o.handler = [](const Item&, AckTransaction&) { return absl::OkStatus(); };
  return o;
}

TEST(RetryPolicy, ValidateNamesTheRetryField) {
  EXPECT_TRUE(Valid().Validate().ok());
  struct Case {
    void (*set)(ConsumerOptions&);
    const char* says;
  };
  const std::vector<Case> cases = {
      {[](ConsumerOptions& o) { o.max_attempts = 0; },
       "ConsumerOptions.max_attempts must be >= 1, got 0"},
      {[](ConsumerOptions& o) { o.backoff_initial = absl::ZeroDuration(); },
       "ConsumerOptions.backoff_initial must be more than 0, got 0"},
      {[](ConsumerOptions& o) { o.backoff_initial = -absl::Seconds(1); },
       "ConsumerOptions.backoff_initial must be more than 0, got -1s"},
      {[](ConsumerOptions& o) { o.backoff_max = absl::Milliseconds(500); },
       "ConsumerOptions.backoff_max must be >= "
       "ConsumerOptions.backoff_initial (1s), got 500ms"},
  };
  for (const Case& c : cases) {
    ConsumerOptions o = Valid();
    c.set(o);
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_EQ(s.message(), c.says);
  }
  ConsumerOptions equal = Valid();
  equal.backoff_max = equal.backoff_initial;
  EXPECT_TRUE(equal.Validate().ok());
}

TEST(FailureLogLimiter, OneLinePerPartPerIntervalWithTheCountHeldBack) {
  FailureLogLimiter limiter(absl::Seconds(5));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  int64_t held = -1;
  EXPECT_TRUE(limiter.Admit(3, t0, &held));
  EXPECT_EQ(held, 0);
  // The same part within the interval: held back, counted.
  for (int i = 1; i <= 4; ++i) {
    EXPECT_FALSE(limiter.Admit(3, t0 + absl::Seconds(i), &held));
  }
  // Another part has an interval of its own.
  EXPECT_TRUE(limiter.Admit(4, t0 + absl::Seconds(1), &held));
  EXPECT_EQ(held, 0);
  // Once the interval passed: a line, saying how many were held back.
  EXPECT_TRUE(limiter.Admit(3, t0 + absl::Seconds(5), &held));
  EXPECT_EQ(held, 4);
  EXPECT_FALSE(limiter.Admit(3, t0 + absl::Seconds(9), &held));
  EXPECT_TRUE(limiter.Admit(3, t0 + absl::Seconds(10), &held));
  EXPECT_EQ(held, 1);
}

}  // namespace
}  // namespace sqlgroup
