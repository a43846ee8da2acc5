#include "item_ids.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

namespace sqlgroup {
namespace {

constexpr uint64_t kLastTime = (uint64_t{1} << kItemTimeBits) - 1;
constexpr uint64_t kNov2026 = 1795000000ULL * 1000000;  // unix micros

TEST(ItemIdTest, StaysInsideItsPartWhateverTheTimeAndNoise) {
  for (int parts : {1, 2, 3, 7, 16, 1000, kMaxParts}) {
    for (int part : {0, parts / 2, parts - 1}) {
      SCOPED_TRACE(testing::Message() << "part " << part << " of " << parts);
      const KeyRange r = PartRange(part, parts);
      for (uint64_t t : {uint64_t{0}, kNov2026, kLastTime, ~uint64_t{0}}) {
        for (Uuid128 noise : {Uuid128(0), absl::Uint128Max()}) {
          const Uuid128 id = ItemId(part, parts, t, noise);
          EXPECT_GE(id, r.first);
          EXPECT_LE(id, r.last);
          EXPECT_EQ(PartOf(id, parts), part);
        }
      }
    }
  }
}

TEST(ItemIdTest, ALaterTimeSortsAfterAnyNoise) {
  for (int parts : {1, 16, kMaxParts}) {
    SCOPED_TRACE(parts);
    const int part = parts - 1;
    EXPECT_LT(ItemId(part, parts, kNov2026, absl::Uint128Max()),
              ItemId(part, parts, kNov2026 + 1, 0));
    EXPECT_LT(ItemId(part, parts, 0, absl::Uint128Max()),
              ItemId(part, parts, kLastTime, 0));
  }
}

TEST(ItemIdTest, NoiseSeparatesItemsOfOneMicrosecond) {
  // At the most parts, 63 bits of noise remain below the time.
  const Uuid128 a = ItemId(5, kMaxParts, kNov2026, 1);
  const Uuid128 b = ItemId(5, kMaxParts, kNov2026, uint64_t{1} << 63);
  EXPECT_NE(a, b);
  EXPECT_NE(a, ItemId(5, kMaxParts, kNov2026, 2));
}

TEST(ItemIdTest, TimesPastTheFieldAreClampedNotWrapped) {
  EXPECT_EQ(ItemId(3, 16, ~uint64_t{0}, 7), ItemId(3, 16, kLastTime, 7));
  EXPECT_GT(ItemId(3, 16, ~uint64_t{0}, 7), ItemId(3, 16, kNov2026, 7));
}

// The part of each id.
std::vector<int> PartsOf(const std::vector<Uuid128>& ids, int parts) {
  std::vector<int> out;
  for (const Uuid128& id : ids) out.push_back(PartOf(id, parts));
  return out;
}

TEST(ItemIdGeneratorTest, SingleItemsSpreadEvenlyOverTheParts) {
  ItemIdGenerator gen;
  std::map<int, int> per_part;
  for (int i = 0; i < 32000; ++i)
    ++per_part[PartsOf(gen.Next(16, 1, kNov2026), 16)[0]];
  ASSERT_EQ(per_part.size(), 16u);
  // 2,000 expected per part, standard deviation ~43: 10 sigmas either way.
  for (const auto& [part, n] : per_part) {
    EXPECT_GT(n, 1560) << "part " << part;
    EXPECT_LT(n, 2440) << "part " << part;
  }
}

TEST(ItemIdGeneratorTest, ASmallCallReachesAsManyPartsAsItHasItems) {
  ItemIdGenerator gen;
  for (size_t count : {1, 5, 16, 17, 100}) {
    std::map<int, int> per_part;
    for (int part : PartsOf(gen.Next(16, count, kNov2026), 16)) {
      ++per_part[part];
    }
    EXPECT_EQ(per_part.size(), std::min<size_t>(count, 16)) << count;
    // 100 items: runs of 6 to 16 parts in turn, the first part twice.
    for (const auto& [part, n] : per_part) {
      EXPECT_LE(n, static_cast<int>(2 * std::max<size_t>(1, count / 16)))
          << count << " items, part " << part;
    }
  }
}

TEST(ItemIdGeneratorTest, ALargeCallGoesToEveryPartInRunsOfAClaimsWorth) {
  ItemIdGenerator gen;
  const std::vector<int> parts = PartsOf(gen.Next(16, 10000, kNov2026), 16);
  std::map<int, int> per_part;
  for (size_t i = 0; i < parts.size(); ++i) {
    ++per_part[parts[i]];
    if (i > 0 && parts[i] != parts[i - 1]) {
      EXPECT_EQ(i % kMaxPartRun, 0u) << "a run ended early at item " << i;
      EXPECT_EQ(parts[i], (parts[i - 1] + 1) % 16) << "item " << i;
    }
  }
  // 156 whole runs and one of 16 items, dealt in turn.
  ASSERT_EQ(per_part.size(), 16u);
  for (const auto& [part, n] : per_part) {
    EXPECT_GE(n, 9 * kMaxPartRun) << "part " << part;
    EXPECT_LE(n, 10 * kMaxPartRun + 16) << "part " << part;
  }
}

TEST(ItemIdGeneratorTest, ARunOfOneDealsItemsToThePartsInTurn) {
  ItemIdGenerator gen(/*max_run=*/1);
  const std::vector<int> parts = PartsOf(gen.Next(16, 1000, kNov2026), 16);
  for (size_t i = 1; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i], (parts[i - 1] + 1) % 16) << "item " << i;
  }
}

TEST(ItemIdGeneratorTest, IdsOfAPartRiseInTheOrderMadeThoughTheClockStalls) {
  ItemIdGenerator gen;
  constexpr int kParts = 3;
  std::map<int, Uuid128> last;
  // The clock stands still, then runs backwards by a second; calls of one
  // item and of many.
  for (int call = 0; call < 300; ++call) {
    const uint64_t now = call < 200 ? kNov2026 : kNov2026 - 1000000;
    for (const Uuid128& id : gen.Next(kParts, call % 2 == 0 ? 1 : 20, now)) {
      const int part = PartOf(id, kParts);
      auto it = last.find(part);
      if (it != last.end()) {
        EXPECT_GT(id, it->second) << "call " << call;
      }
      last[part] = id;
    }
  }
  EXPECT_EQ(last.size(), kParts);
}

TEST(ItemIdGeneratorTest, FollowsTheClockWhenItMovesOn) {
  ItemIdGenerator gen;
  const Uuid128 early = gen.Next(1, 1, kNov2026)[0];
  const Uuid128 late = gen.Next(1, 1, kNov2026 + 60000000)[0];
  // A minute later: the time field moved by 60,000,000 microseconds.
  EXPECT_EQ(late >> (127 - kItemTimeBits),
            (early >> (127 - kItemTimeBits)) + 60000000);
}

}  // namespace
}  // namespace sqlgroup
