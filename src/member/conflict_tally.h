// How many times in a row each item's acknowledgement hit a transient
// conflict (serialization failure, deadlock, lock timeout), across the
// workers of one member, so a handler that conflicts every time is
// eventually counted as failing instead of being retried forever.
// Bounded in size. Thread safety: all methods from any thread.
#ifndef SQLGROUP_MEMBER_CONFLICT_TALLY_H_
#define SQLGROUP_MEMBER_CONFLICT_TALLY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sqlgroup {

class ConflictTally {
 public:
  // Counts one more conflict of item `id`; returns how many in a row now.
  int Add(const std::string& id) {
    absl::MutexLock lock(&mu_);
    // Forgetting everything only delays the count for the items in it.
    if (counts_.size() >= kMaxTracked) counts_.clear();
    return ++counts_[id];
  }
  // The items succeeded, failed or left: start over for them.
  void Forget(const std::vector<std::string>& ids) {
    absl::MutexLock lock(&mu_);
    if (counts_.empty()) return;
    for (const std::string& id : ids) counts_.erase(id);
  }

 private:
  static constexpr size_t kMaxTracked = 10000;
  absl::Mutex mu_;
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_CONFLICT_TALLY_H_
