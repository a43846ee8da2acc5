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

#include <cstdint>

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

// Ids for one producer thread: a random part for each item (items spread
// evenly over the parts), and a clock that never repeats or runs back, so
// this generator's ids of one part increase in the order it made them.
class ItemIdGenerator {
 public:
  Uuid128 Next(int parts, uint64_t now_unix_micros);

 private:
  absl::BitGen gen_;
  uint64_t last_micros_ = 0;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_ITEM_IDS_H_
