// Waiting on a condition with a deadline, instead of sleeping blindly.
#ifndef SQLGROUP_TESTS_SUPPORT_WAIT_H_
#define SQLGROUP_TESTS_SUPPORT_WAIT_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sqlgroup::testing {

// Polls `condition` every `every` until it holds (true) or `timeout`
// passes (false).
inline bool WaitFor(const std::function<bool()>& condition,
                    absl::Duration timeout,
                    absl::Duration every = absl::Milliseconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (condition()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(every);
  }
}

}  // namespace sqlgroup::testing

#endif  // SQLGROUP_TESTS_SUPPORT_WAIT_H_
