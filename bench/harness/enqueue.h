// Enqueue throughput with and without an idempotency key (issue 23): one
// connection enqueues batches of `batch` items in a loop for `seconds`,
// each batch its own transaction, through Producer::EnqueueIn, either
// plain or keyed as a Producer keys its batches (a key per batch, the
// previous batch's forgotten in the same transaction). Prints one JSON
// line: {"bench":"enqueue","mode":..,"batch":..,"items_per_s":..}.
#ifndef SQLGROUP_BENCH_HARNESS_ENQUEUE_H_
#define SQLGROUP_BENCH_HARNESS_ENQUEUE_H_

#include <string>

namespace sqlgroup::bench {

struct EnqueueConfig {
  std::string dsn;
  std::string group = "bench-enqueue";  // created if missing, 16 parts
  std::string mode = "plain";           // plain | keyed
  int batch = 1;
  double seconds = 5;
};

void RunEnqueue(const EnqueueConfig& c);

}  // namespace sqlgroup::bench

#endif  // SQLGROUP_BENCH_HARNESS_ENQUEUE_H_
