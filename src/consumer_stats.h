// The counters a member keeps, shared by its threads without a lock.
#ifndef SQLGROUP_CONSUMER_STATS_H_
#define SQLGROUP_CONSUMER_STATS_H_

#include <atomic>
#include <cstdint>

#include "sqlgroup/consumer.h"

namespace sqlgroup::internal {

struct AtomicStats {
  std::atomic<int64_t> claimed{0};
  std::atomic<int64_t> acked{0};
  std::atomic<int64_t> failed{0};
  std::atomic<int64_t> dead_lettered{0};
  std::atomic<int64_t> lost_claims{0};
  std::atomic<int64_t> sessions_lost{0};
  std::atomic<int64_t> rebalances{0};
  std::atomic<int64_t> last_rebalance_us{0};

  ConsumerStats Snapshot() const {
    ConsumerStats s;
    s.claimed = claimed.load();
    s.acked = acked.load();
    s.failed = failed.load();
    s.dead_lettered = dead_lettered.load();
    s.lost_claims = lost_claims.load();
    s.sessions_lost = sessions_lost.load();
    s.rebalances = rebalances.load();
    s.last_rebalance = absl::Microseconds(last_rebalance_us.load());
    return s;
  }
};

}  // namespace sqlgroup::internal

#endif  // SQLGROUP_CONSUMER_STATS_H_
