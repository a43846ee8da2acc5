// How often a member logs its items' failed attempts: at most one line per
// part per interval, the next line saying how many were held back, so a
// dependency that is down for an hour fills no disk (one line per part per
// 5 s, not one per item and attempt) while every part still shows it.
// Pure but for the mutex: the caller passes the time. Thread safety: all
// methods from any thread (a member's workers share one).
#ifndef SQLGROUP_MEMBER_FAILURE_LOG_H_
#define SQLGROUP_MEMBER_FAILURE_LOG_H_

#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sqlgroup {

class FailureLogLimiter {
 public:
  explicit FailureLogLimiter(absl::Duration every = absl::Seconds(5))
      : every_(every) {}

  // A failure in `part` at `now`: true if it may be logged, with
  // *suppressed set to the failures of that part held back since its last
  // line; false (counted) if the part logged a line less than `every` ago.
  bool Admit(int part, absl::Time now, int64_t* suppressed) {
    absl::MutexLock lock(&mu_);
    PartLog& p = parts_[part];  // at most the group's parts (<= 4096)
    if (now < p.last + every_) {
      ++p.held_back;
      return false;
    }
    *suppressed = p.held_back;
    p.held_back = 0;
    p.last = now;
    return true;
  }

 private:
  struct PartLog {
    absl::Time last = absl::InfinitePast();
    int64_t held_back = 0;
  };
  const absl::Duration every_;
  absl::Mutex mu_;
  std::map<int, PartLog> parts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_FAILURE_LOG_H_
