// Rebalance latency: `sqlgroup consume` processes in a group of `parts`;
// repeatedly one joins, one leaves gracefully (SIGTERM), one joins, one is
// killed (SIGKILL), one restarts (SIGTERM, then the same --instance again),
// one is killed and restarted at once. Static members (static_timeout_s)
// join and restart only: their SIGTERM keeps their place. Each change is
// timed until every part is owned by its target among the live members
// under the group's assignor ("owned"), and until one new item in every
// part has been acknowledged after that ("processing"). Also counts the
// parts owned at some point by another member than before against the
// fewest any balanced assignment could move, and the longest time a part
// had no running owner (free, held by the stopped member, or by a session
// no longer live). Prints one JSON line per change.
#ifndef SQLGROUP_BENCH_HARNESS_REBALANCE_H_
#define SQLGROUP_BENCH_HARNESS_REBALANCE_H_

#include <string>

namespace sqlgroup::bench {

struct RebalanceConfig {
  std::string dsn;
  std::string cli = "build/sqlgroup";
  int members = 3;  // before each join
  int parts = 16;
  int trials = 5;
  bool notify = true;  // false: members and the harness poll only
  double ttl_s = 3;    // heartbeat ttl/3
  std::string log_dir = "/tmp";
  std::string assignor = "lexical";  // the group's: lexical or sticky
  double static_timeout_s = 0;       // > 0: static members
};

void RunRebalance(const RebalanceConfig& config);

}  // namespace sqlgroup::bench

#endif  // SQLGROUP_BENCH_HARNESS_REBALANCE_H_
