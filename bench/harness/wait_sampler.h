// Samples pg_stat_activity on its own connection while a benchmark runs:
// what the benchmark's active backends wait on (heavyweight locks, LWLocks,
// I/O, the client) or whether they run.
#ifndef SQLGROUP_BENCH_HARNESS_WAIT_SAMPLER_H_
#define SQLGROUP_BENCH_HARNESS_WAIT_SAMPLER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>

#include "absl/time/time.h"

namespace sqlgroup::bench {

struct WaitSummary {
  int64_t ticks = 0;  // samples taken
  // "type:event" (or "CPU" for active and not waiting) -> backends seen in
  // that state, summed over the samples.
  std::map<std::string, int64_t> events;
  int64_t lock_waits = 0;    // wait_event_type Lock: row/transaction locks
  int64_t lwlock_waits = 0;  // wait_event_type LWLock: buffers, WAL, ...
  int64_t active = 0;        // active backends, summed over the samples

  // {"ticks": .., "lock": .., "lwlock": .., "active": .., "top": {..}}
  std::string Json() const;
};

class WaitSampler {
 public:
  // Samples backends whose application_name is LIKE `app_pattern`.
  WaitSampler(std::string dsn, std::string app_pattern, absl::Duration every);
  ~WaitSampler();
  void Start();
  WaitSummary Stop();

 private:
  void Run();

  const std::string dsn_;
  const std::string pattern_;
  const absl::Duration every_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  WaitSummary summary_;  // written by thread_ only until Stop() joins it
};

}  // namespace sqlgroup::bench

#endif  // SQLGROUP_BENCH_HARNESS_WAIT_SAMPLER_H_
