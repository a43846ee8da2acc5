// Exponential backoff with jitter, for retries of items and reconnects.
#ifndef SQLGROUP_MEMBER_BACKOFF_H_
#define SQLGROUP_MEMBER_BACKOFF_H_

#include <algorithm>

#include "absl/random/random.h"
#include "absl/time/time.h"

namespace sqlgroup {

// initial * 2^(attempt-1), capped at `max`, times a factor in [0.8, 1.2).
inline absl::Duration Backoff(int attempt, absl::Duration initial,
                              absl::Duration max) {
  static thread_local absl::BitGen gen;
  absl::Duration d = initial;
  for (int i = 1; i < attempt && d < max; ++i) d *= 2;
  d = std::min(d, max);
  return d * absl::Uniform(gen, 0.8, 1.2);
}

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_BACKOFF_H_
