// Exponential backoff with jitter, for retries of items and reconnects.
#ifndef SQLGROUP_MEMBER_BACKOFF_H_
#define SQLGROUP_MEMBER_BACKOFF_H_

#include <algorithm>

#include "absl/random/random.h"
#include "absl/time/time.h"

namespace sqlgroup {

// The jitter Backoff() applies: a factor in [kBackoffJitterLow,
// kBackoffJitterHigh), so members that failed together do not all come
// back together.
inline constexpr double kBackoffJitterLow = 0.8;
inline constexpr double kBackoffJitterHigh = 1.2;

// initial * 2^(attempt-1), capped at `max`, before jitter (pure: the
// retry table in docs/HANDLERS.md is this).
inline absl::Duration BackoffBase(int attempt, absl::Duration initial,
                                  absl::Duration max) {
  absl::Duration d = initial;
  for (int i = 1; i < attempt && d < max; ++i) d *= 2;
  return std::min(d, max);
}

// BackoffBase times a factor in [0.8, 1.2).
inline absl::Duration Backoff(int attempt, absl::Duration initial,
                              absl::Duration max) {
  static thread_local absl::BitGen gen;
  return BackoffBase(attempt, initial, max) *
         absl::Uniform(gen, kBackoffJitterLow, kBackoffJitterHigh);
}

// When an item's next try may come after a failure: the jittered
// `backoff`, or later if the handler asked to wait (`asked`, e.g. an HTTP
// Retry-After), but never later than `max` because of what was asked.
inline absl::Duration NextTryDelay(absl::Duration backoff, absl::Duration asked,
                                   absl::Duration max) {
  return std::max(backoff, std::min(asked, max));
}

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_BACKOFF_H_
