// Reads metric values back from a prometheus::Registry that consumers in
// the test wrote to, as a scrape would see them.
#ifndef SQLGROUP_TESTS_SUPPORT_METRIC_READER_H_
#define SQLGROUP_TESTS_SUPPORT_METRIC_READER_H_

#include <map>
#include <string>

namespace prometheus {
class Registry;
}

namespace sqlgroup::testing {

// The sum of the counter or gauge values of family `name`'s series that
// carry every label in `labels`; 0 when none does.
double MetricSum(prometheus::Registry& registry, const std::string& name,
                 const std::map<std::string, std::string>& labels = {});

}  // namespace sqlgroup::testing

#endif  // SQLGROUP_TESTS_SUPPORT_METRIC_READER_H_
