// Where a new item's id goes in the key space. An id is its part's range
// start plus an offset that grows with the enqueue time, so within a part
// key order is enqueue order. The sweep along the primary key then reads
// a part's items oldest first and, because PostgreSQL's heap is in insert
// order too, from neighbouring pages: with random ids every claimed item
// was a heap page of its own (bench/RESULTS.md, claim cost). Enqueues
// append at each part's end of the index instead of splitting random
// leaves. Ids are opaque 128-bit keys, not RFC 9562 UUIDs of any version.
// Pure and thread-compatible (one generator per thread).
#ifndef SQLGROUP_ITEM_IDS_H_
#define SQLGROUP_ITEM_IDS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/random/random.h"
#include "keyspace.h"

namespace sqlgroup {

// Microseconds since the Unix epoch fit in this many bits until 2112;
// later times are clamped (ids stay in range, order within a part is lost).
inline constexpr int kItemTimeBits = 52;

// The id of an item of part `part` of `parts` enqueued at `unix_micros`:
// the range start plus (time << k | low k bits of `noise`), where k leaves
// room for the time under the range's size. Always inside the part's
// range; for one part, a later time gives a larger id whatever the noise.
Uuid128 ItemId(int part, int parts, uint64_t unix_micros, Uuid128 noise);

// The longest run of one call's items in one part: about a heap page of
// small items and a default claim's worth. A large call then lands on each
// part's pages in runs, not one row per page in turn for every part: a
// claim at 1M items touched 6-7 buffers instead of 19-24, though its
// latency did not measurably change (bench/RESULTS.md, session 8).
inline constexpr int kMaxPartRun = 64;

// Ids for one producer thread. The items of one call are dealt to
// successive parts from a random one, in runs of count / parts items
// (at least 1, at most `max_run`): a small call spreads over as many parts
// as it has items, a large one evenly over all of them, each part's share
// in runs of neighbours. A clock that never repeats or runs back keeps
// this generator's ids of one part increasing in the order it made them.
class ItemIdGenerator {
 public:
  explicit ItemIdGenerator(int max_run = kMaxPartRun) : max_run_(max_run) {}

  // Ids for `count` items enqueued together into a group of `parts`.
  std::vector<Uuid128> Next(int parts, size_t count, uint64_t now_unix_micros);

  // Ids for one call's items, whose keys are `keys` (nullptr: no key), in
  // call order: an item with a key goes in its key's block
  // (key_placement.h), whatever `parts`; the others are dealt as Next
  // deals them. Each id takes its own microsecond, so the items of a key
  // keep the order of this generator's calls and of their place in a call.
  std::vector<Uuid128> Next(int parts,
                            const std::vector<const std::string*>& keys,
                            uint64_t now_unix_micros);

 private:
  // A microsecond after the last one this generator gave out.
  uint64_t Tick(uint64_t now_unix_micros);

  const int max_run_;
  absl::BitGen gen_;
  uint64_t last_micros_ = 0;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_ITEM_IDS_H_
