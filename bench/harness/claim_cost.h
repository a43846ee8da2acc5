// Claim latency against the backlog: with `backlog` items waiting in a
// group, one session owning every part claims `claim_batch` items at a
// time (the workers' own statement, sweeping each part from its cursor).
// A claim writes nothing (schema 5), so the backlog stays put. Prints
// p50/p99/max of the claim statement, in ms, and the heap and index pages
// PostgreSQL had to read in per claim: with random ids every claimed item
// sits on a page of its own; with the producer's, a part's items are
// neighbours in the heap.
#ifndef SQLGROUP_BENCH_HARNESS_CLAIM_COST_H_
#define SQLGROUP_BENCH_HARNESS_CLAIM_COST_H_

#include <cstdint>
#include <string>

namespace sqlgroup::bench {

struct ClaimCostConfig {
  std::string dsn;
  int64_t backlog = 10000;
  int samples = 1000;
  int claim_batch = 64;
  int parts = 16;
  // "producer" (ids as the producer makes them) or "random" (random
  // UUIDs): each in a group of its own; a run empties the other's group
  // first, so the table holds one backlog at a time.
  std::string layout = "producer";
};

void RunClaimCost(const ClaimCostConfig& config);

}  // namespace sqlgroup::bench

#endif  // SQLGROUP_BENCH_HARNESS_CLAIM_COST_H_
