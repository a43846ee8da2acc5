// Keyed items (issue 19): throughput of one Consumer over a backlog of
// keyed or unkeyed items, loaded beforehand through the library's
// Producer (so keyed items are placed as users' are), in a group of a given
// ordering. With a hot key, the items/s of the hot key and of the other
// keys are counted apart (by the key the handler sees).
#ifndef SQLGROUP_BENCH_HARNESS_KEYED_H_
#define SQLGROUP_BENCH_HARNESS_KEYED_H_

#include <cstdint>
#include <string>

namespace sqlgroup::bench {

// The backlogs (`items`), each in a group of its own named
// kb_<items>_<ordering>, kept between runs and topped up:
//   unkeyed  items without a key
//   keys     items spread evenly over `keys` keys (k0, k1, ..), enqueued
//            round robin
//   hot      the key "hot" carries `hot_share` of the items, the others
//            are spread evenly over `keys` - 1 keys
// Each run: one Consumer with `consumers` workers, the per-item handler
// (claims of claim_batch) or the batch handler (claims of `batch`), a
// noop handler that counts what it sees.
struct KeyedConfig {
  std::string dsn;
  std::string items = "keys";    // unkeyed | keys | hot
  std::string ordering = "key";  // the group's: key | none
  std::string handler = "item";  // item | batch
  int keys = 1000;
  double hot_share = 0.5;  // hot: the hot key's share, 0 < share < 1
  int consumers = 8;
  int parts = 16;
  int batch = 100;
  int claim_batch = 64;
  // Waiting items before the run starts, not counting the hot key's: for
  // `hot`, the other keys have this many, and the hot key at least
  // backlog * hot_share / (1 - hot_share) (its leftovers stay).
  int64_t backlog = 80000;
  int64_t enqueue_batch = 10000;  // items per Producer::Enqueue call
  double warmup_s = 1;
  double seconds = 3;
};

// Runs one measurement and prints its JSON line. Returns false when a
// class of items ran out (or, under ordering 'key', some key ran out of
// items) before the window ended: the figure is then too low.
bool RunKeyed(const KeyedConfig& config);

}  // namespace sqlgroup::bench

#endif  // SQLGROUP_BENCH_HARNESS_KEYED_H_
