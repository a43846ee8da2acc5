#include "cpu_meter.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace sqlgroup::bench {

CpuSample SampleCpu() {
  CpuSample s;
  rusage self{};
  getrusage(RUSAGE_SELF, &self);
  s.self_s =
      static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
      static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
  // cpu  user nice system idle iowait irq softirq steal ...
  std::ifstream stat("/proc/stat");
  std::string label;
  int64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0,
          softirq = 0, steal = 0;
  stat >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq >>
      steal;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  // Time the hypervisor gave to other machines (steal) is neither.
  (void)steal;
  const int64_t busy = user + nice + system + irq + softirq;
  s.busy_s = static_cast<double>(busy) / tick;
  s.total_s = static_cast<double>(busy + idle + iowait) / tick;
  return s;
}

CpuCost CostBetween(const CpuSample& a, const CpuSample& b, int64_t items) {
  CpuCost c;
  const double n = static_cast<double>(std::max<int64_t>(1, items));
  const double self = b.self_s - a.self_s;
  const double busy = b.busy_s - a.busy_s;
  c.client_us_per_item = 1e6 * self / n;
  c.rest_us_per_item = 1e6 * std::max(0.0, busy - self) / n;
  const double total = b.total_s - a.total_s;
  c.machine_busy = total > 0 ? busy / total : 0;
  return c;
}

}  // namespace sqlgroup::bench
