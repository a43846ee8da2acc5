#include "support/metric_reader.h"

#include <prometheus/registry.h>

namespace sqlgroup::testing {

double MetricSum(prometheus::Registry& registry, const std::string& name,
                 const std::map<std::string, std::string>& labels) {
  double sum = 0;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      size_t matched = 0;
      for (const prometheus::ClientMetric::Label& l : m.label) {
        auto it = labels.find(l.name);
        matched += it != labels.end() && it->second == l.value;
      }
      if (matched != labels.size()) continue;
      sum += family.type == prometheus::MetricType::Counter ? m.counter.value
                                                            : m.gauge.value;
    }
  }
  return sum;
}

}  // namespace sqlgroup::testing
