// sqlgroup_bench: the C++ side of the benchmark suite (bench/run_bench.py
// drives it). Each subcommand runs one measurement against a database that
// already has sqlgroup's schema, and prints one JSON line per result.
//
//   sqlgroup_bench setup --dsn=..
//   sqlgroup_bench throughput --dsn=.. --system=skiplocked --consumers=8
//   sqlgroup_bench claim_cost --dsn=.. --backlog=1000000
//       [--layout=interleaved|random]
//   sqlgroup_bench rebalance --dsn=.. --cli=build/sqlgroup --notify=true
//   sqlgroup_bench keyed --dsn=.. --items=keys|unkeyed|hot --ordering=key
//       --handler=item|batch
//   sqlgroup_bench enqueue --dsn=.. --mode=plain|keyed --batch=1
#include <cstdio>
#include <exception>
#include <string>

#include "claim_cost.h"
#include "common.h"
#include "enqueue.h"
#include "keyed.h"
#include "rebalance.h"
#include "throughput.h"

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: sqlgroup_bench "
               "setup|throughput|claim_cost|rebalance|keyed|enqueue --dsn=DSN "
               "[--flag=value ...]\n(see bench/harness/*.h for "
               "the flags of each)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sqlgroup::bench;
  if (argc < 2) return Usage();
  const std::string command = argv[1];
  const Flags flags(argc, argv, 2);
  const std::string dsn = flags.Str("dsn", "");
  try {
    if (command == "setup") {
      SetUpSchema(dsn);
      return 0;
    }
    if (command == "throughput") {
      ThroughputConfig c;
      c.dsn = dsn;
      c.system = flags.Str("system", "sqlgroup");
      c.consumers = static_cast<int>(flags.Int("consumers", c.consumers));
      c.parts = static_cast<int>(flags.Int("parts", c.parts));
      c.batch = static_cast<int>(flags.Int("batch", c.batch));
      c.claim_batch = static_cast<int>(flags.Int("claim_batch", c.claim_batch));
      c.backlog = flags.Int("backlog", c.backlog);
      c.warmup_s = flags.Double("warmup", c.warmup_s);
      c.seconds = flags.Double("seconds", c.seconds);
      return RunThroughput(c) ? 0 : 3;
    }
    if (command == "claim_cost") {
      ClaimCostConfig c;
      c.dsn = dsn;
      c.backlog = flags.Int("backlog", c.backlog);
      c.samples = static_cast<int>(flags.Int("samples", c.samples));
      c.claim_batch = static_cast<int>(flags.Int("claim_batch", c.claim_batch));
      c.parts = static_cast<int>(flags.Int("parts", c.parts));
      c.layout = flags.Str("layout", c.layout);
      RunClaimCost(c);
      return 0;
    }
    if (command == "rebalance") {
      RebalanceConfig c;
      c.dsn = dsn;
      c.cli = flags.Str("cli", c.cli);
      c.members = static_cast<int>(flags.Int("members", c.members));
      c.parts = static_cast<int>(flags.Int("parts", c.parts));
      c.trials = static_cast<int>(flags.Int("trials", c.trials));
      c.notify = flags.Bool("notify", c.notify);
      c.ttl_s = flags.Double("ttl", c.ttl_s);
      c.log_dir = flags.Str("log_dir", c.log_dir);
      c.assignor = flags.Str("assignor", c.assignor);
      c.static_timeout_s = flags.Double("static_timeout", c.static_timeout_s);
      RunRebalance(c);
      return 0;
    }
    if (command == "enqueue") {
      EnqueueConfig c;
      c.dsn = dsn;
      c.mode = flags.Str("mode", c.mode);
      c.batch = static_cast<int>(flags.Int("batch", c.batch));
      c.seconds = flags.Double("seconds", c.seconds);
      RunEnqueue(c);
      return 0;
    }
    if (command == "keyed") {
      KeyedConfig c;
      c.dsn = dsn;
      c.items = flags.Str("items", c.items);
      c.ordering = flags.Str("ordering", c.ordering);
      c.handler = flags.Str("handler", c.handler);
      c.keys = static_cast<int>(flags.Int("keys", c.keys));
      c.hot_share = flags.Double("hot_share", c.hot_share);
      c.consumers = static_cast<int>(flags.Int("consumers", c.consumers));
      c.parts = static_cast<int>(flags.Int("parts", c.parts));
      c.batch = static_cast<int>(flags.Int("batch", c.batch));
      c.claim_batch = static_cast<int>(flags.Int("claim_batch", c.claim_batch));
      c.backlog = flags.Int("backlog", c.backlog);
      c.enqueue_batch = flags.Int("enqueue_batch", c.enqueue_batch);
      c.warmup_s = flags.Double("warmup", c.warmup_s);
      c.seconds = flags.Double("seconds", c.seconds);
      return RunKeyed(c) ? 0 : 3;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sqlgroup_bench %s: %s\n", command.c_str(), e.what());
    return 1;
  }
  return Usage();
}
