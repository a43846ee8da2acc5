// End-to-end throughput of one queue implementation over a pre-produced
// backlog, with a noop handler: items acknowledged (deleted) per second in
// a steady window, and the lock waits sampled meanwhile.
#ifndef SQLGROUP_BENCH_HARNESS_THROUGHPUT_H_
#define SQLGROUP_BENCH_HARNESS_THROUGHPUT_H_

#include <cstdint>
#include <string>

namespace sqlgroup::bench {

// The systems compared, all with `consumers` connections doing the work:
//   sqlgroup        one Consumer with `consumers` workers, one transaction
//                   per item (claims of claim_batch items)
//   sqlgroup_batch  the same with the batch handler: every claim of `batch`
//                   items acknowledged in one transaction
//   skiplocked      the seed's queue: BEGIN; SELECT .. ORDER BY id LIMIT 1
//                   FOR UPDATE SKIP LOCKED; (noop); DELETE; COMMIT
//   skiplocked_batch  the same with LIMIT `batch`
//   limit           PostgreSQL's limit: each connection deletes pre-loaded
//                   rows by primary key, one row per (autocommit) statement,
//                   the rows of its share of the parts in key order
//   limit_batch     the same, `batch` rows per statement
struct ThroughputConfig {
  std::string dsn;
  std::string system;
  int consumers = 8;
  int parts = 16;  // sqlgroup's group; the ids' layout in every table
  int batch = 100;
  int claim_batch = 64;      // sqlgroup's one-per-transaction claims
  int64_t backlog = 100000;  // waiting items before the run starts
  double warmup_s = 1;
  double seconds = 5;
};

// Runs one measurement and prints its JSON line. Returns false when the
// backlog ran out before the window ended (the figure is then too low).
bool RunThroughput(const ThroughputConfig& config);

}  // namespace sqlgroup::bench

#endif  // SQLGROUP_BENCH_HARNESS_THROUGHPUT_H_
