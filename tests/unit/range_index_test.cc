#include "member/range_index.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "absl/numeric/int128.h"

namespace sqlgroup {
namespace {

std::vector<int> BruteForce(const std::map<int, KeyRange>& owned,
                            const std::vector<KeyRange>& ranges) {
  std::vector<int> parts;
  for (const auto& [part, o] : owned) {
    for (const KeyRange& r : ranges) {
      if (r.first <= o.last && o.first <= r.last) {
        parts.push_back(part);
        break;
      }
    }
  }
  return parts;  // ascending: a map's order
}

Uuid128 RandomKey(std::mt19937_64& rng) {
  // Now and then an edge of the key space.
  switch (rng() % 8) {
    case 0:
      return 0;
    case 1:
      return absl::Uint128Max();
    default:
      return absl::MakeUint128(rng(), rng());
  }
}

// A randomized checker against a scan of every owned part: parts of one
// count or of two (overlapping ranges, as while a part count changes),
// inserted and erased at random, asked about with up to 16 ranges: points,
// prefix ranges like an announcement's, and ranges of any width.
TEST(RangeIndex, FindsExactlyThePartsAScanFinds) {
  std::mt19937_64 rng(20261126);
  const int kCounts[] = {1, 2, 3, 7, 16, 256, 4096};
  for (int round = 0; round < 300; ++round) {
    SCOPED_TRACE(round);
    const int count = kCounts[rng() % 7];
    const int other = kCounts[rng() % 7];
    RangeIndex index;
    std::map<int, KeyRange> owned;
    for (int step = 0; step < 200; ++step) {
      // Part numbers of the second count are offset to stay distinct.
      const bool second = rng() % 4 == 0;
      const int parts = second ? other : count;
      const int p = static_cast<int>(rng() % parts);
      const int part = second ? 100000 + p : p;
      auto it = owned.find(part);
      if (it != owned.end() && rng() % 2 == 0) {
        index.Erase(part, it->second);
        owned.erase(it);
      } else if (it == owned.end()) {
        owned[part] = PartRange(p, parts);
        index.Insert(part, owned[part]);
      }
      std::vector<KeyRange> ranges(1 + rng() % 16);
      for (KeyRange& r : ranges) {
        const Uuid128 a = RandomKey(rng);
        switch (rng() % 3) {
          case 0:
            r = {a, a};
            break;
          case 1: {  // an announcement's prefix: 16 bits
            const Uuid128 first = a >> 112 << 112;
            r = {first, first | (absl::Uint128Max() >> 16)};
            break;
          }
          default: {
            const Uuid128 b = RandomKey(rng);
            r = {std::min(a, b), std::max(a, b)};
          }
        }
      }
      ASSERT_EQ(index.Overlapping(ranges), BruteForce(owned, ranges))
          << "step " << step << ", " << owned.size() << " parts owned";
    }
  }
}

TEST(RangeIndex, ErasesOnlyThePartItNamesAmongThoseOfOneFirstKey) {
  RangeIndex index;
  // Part 1 of 2 and part 2 of 4 both start half way.
  index.Insert(1, PartRange(1, 2));
  index.Insert(2, PartRange(2, 4));
  const KeyRange top = {absl::Uint128Max(), absl::Uint128Max()};
  const KeyRange half = {PartStart(1, 2), PartStart(1, 2)};
  EXPECT_EQ(index.Overlapping({half}), (std::vector<int>{1, 2}));
  index.Erase(2, PartRange(2, 4));
  EXPECT_EQ(index.Overlapping({half}), (std::vector<int>{1}));
  EXPECT_EQ(index.Overlapping({top}), (std::vector<int>{1}));
  index.Erase(1, PartRange(1, 2));
  EXPECT_TRUE(index.Overlapping({half, top}).empty());
}

}  // namespace
}  // namespace sqlgroup
