// CPU spent during a measuring window: by this process (the client side of
// every system: sqlgroup's workers, or the baselines' threads) and by the
// whole machine. On a machine with nothing else running the difference is
// PostgreSQL's, so a system's cost per item splits into client and server.
#ifndef SQLGROUP_BENCH_HARNESS_CPU_METER_H_
#define SQLGROUP_BENCH_HARNESS_CPU_METER_H_

#include <cstdint>

namespace sqlgroup::bench {

struct CpuSample {
  double self_s = 0;   // user + system time of this process
  double busy_s = 0;   // the machine's busy time, all cores (/proc/stat)
  double total_s = 0;  // the machine's time, busy or idle, all cores
};

CpuSample SampleCpu();

// What a window between two samples cost per item, in microseconds, and
// how busy the machine was (0..1 of all its cores).
struct CpuCost {
  double client_us_per_item = 0;
  double rest_us_per_item = 0;  // the machine's busy time but this process's
  double machine_busy = 0;
};

CpuCost CostBetween(const CpuSample& a, const CpuSample& b, int64_t items);

}  // namespace sqlgroup::bench

#endif  // SQLGROUP_BENCH_HARNESS_CPU_METER_H_
