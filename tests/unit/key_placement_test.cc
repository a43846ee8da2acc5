#include "key_placement.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace sqlgroup {
namespace {

constexpr uint64_t kLastBlock = ~uint64_t{0};
constexpr uint64_t kLastTime = (uint64_t{1} << kKeyedTimeBits) - 1;
constexpr uint64_t kNov2026 = 1795000000ULL * 1000000;  // unix micros

// The part counts users pick, and awkward ones.
constexpr int kPartCounts[] = {1,  2,  3,   5,   7,    12,   16,
                               40, 64, 100, 255, 1000, 4095, 4096};

TEST(KeyHash, IsTheDigestsFirstEightBytesBigEndianPinnedForKnownKeys) {
  // The first 16 hex digits of md5(key): changing them moves every key.
  const struct {
    const char* key;
    uint64_t hash;
  } cases[] = {
      {"", 0xd41d8cd98f00b204},
      {"k0", 0x28d61f7b1f07d88c},
      {"user-7", 0x40ca09790c31c57a},
      {"order:12345", 0xd0deb4dfb01b67fa},
      {"Z\xc3\xbcrich", 0x103a821a3a6a0b92},  // "Zürich" in UTF-8
  };
  for (const auto& c : cases) {
    EXPECT_EQ(KeyHash(c.key), c.hash) << '"' << c.key << '"';
  }
}

// Split by the definition, independently of the modular derivation: for
// each part count, the one boundary that can fall in the block is that of
// the least p with floor(p * 2^128 / P) >= block * 2^64, which is
// p = ceil(block * P / 2^64) (boundaries of one P lie 2^116 or more apart).
bool SplitByDefinition(uint64_t block) {
  for (int parts = 2; parts <= kMaxParts; ++parts) {
    const Uuid128 scaled = Uuid128(block) * parts;
    const uint64_t p =
        absl::Uint128High64(scaled) + (absl::Uint128Low64(scaled) != 0 ? 1 : 0);
    if (p >= static_cast<uint64_t>(parts)) continue;
    const Uuid128 boundary = PartStart(static_cast<int>(p), parts);
    if (boundary > BlockStart(block) && boundary <= BlockLast(block)) {
      return true;
    }
  }
  return false;
}

// A boundary floor(p * 2^128 / P), its block, and whether it splits it: it
// does unless it is the block's first id.
struct Boundary {
  int p;
  int parts;
  uint64_t block;
  bool splits;
};

Boundary BoundaryOf(int p, int parts) {
  const Uuid128 start = PartStart(p, parts);
  return {p, parts, absl::Uint128High64(start), absl::Uint128Low64(start) != 0};
}

// Seeded (p, P) pairs, P in [2, kMaxParts], p in [1, P).
std::vector<Boundary> SampleBoundaries(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Boundary> out;
  for (int i = 0; i < count; ++i) {
    const int parts = 2 + static_cast<int>(rng() % (kMaxParts - 1));
    const int p = 1 + static_cast<int>(rng() % (parts - 1));
    out.push_back(BoundaryOf(p, parts));
  }
  return out;
}

TEST(BlockIsSplit, AgreesWithTheBruteForceOnRandomBlocks) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    const uint64_t block = rng();
    ASSERT_EQ(BlockIsSplit(block), testing_only::BlockIsSplitBruteForce(block))
        << std::hex << block;
  }
}

TEST(BlockIsSplit, AgreesWithTheBruteForceOnBlocksNearFractionsOfTheSpace) {
  // Random blocks cut to their top 1..40 bits (so near j / 2^k), and their
  // neighbours: continued fractions with huge or tiny partial quotients.
  std::mt19937_64 rng(12);
  for (int bits = 1; bits <= 40; ++bits) {
    for (int i = 0; i < 10; ++i) {
      const uint64_t top = rng() & ~(~uint64_t{0} >> bits);
      for (uint64_t block : {top - 1, top, top + 1}) {
        ASSERT_EQ(BlockIsSplit(block),
                  testing_only::BlockIsSplitBruteForce(block))
            << std::hex << block;
      }
    }
  }
}

TEST(BlockIsSplit, FindsTheBlockOfEverySampledBoundaryAndSparesItsNeighbours) {
  for (const Boundary& b : SampleBoundaries(600, 13)) {
    SCOPED_TRACE(testing::Message() << "p " << b.p << " of " << b.parts);
    EXPECT_EQ(BlockIsSplit(b.block), b.splits);
    EXPECT_EQ(testing_only::BlockIsSplitBruteForce(b.block), b.splits);
    // Other boundaries lie 2^104 or more away.
    EXPECT_FALSE(BlockIsSplit(b.block - 1));
    EXPECT_FALSE(testing_only::BlockIsSplitBruteForce(b.block - 1));
    EXPECT_FALSE(BlockIsSplit(b.block + 1));
    EXPECT_FALSE(testing_only::BlockIsSplitBruteForce(b.block + 1));
  }
}

TEST(BlockIsSplit, FindsEveryBoundaryOfEveryPartCount) {
  // All 8,386,560 boundaries: none is missed, and only those at a block's
  // first id (p / P reduces to a power-of-two denominator) leave it whole.
  int64_t whole = 0;
  for (int parts = 2; parts <= kMaxParts; ++parts) {
    for (int p = 1; p < parts; ++p) {
      const Boundary b = BoundaryOf(p, parts);
      if (BlockIsSplit(b.block) != b.splits) {
        FAIL() << "p " << p << " of " << parts << ", block " << std::hex
               << b.block;
      }
      if (!b.splits) ++whole;
    }
  }
  // With P = 2^a * m, m odd, that is p a multiple of m: 2^a - 1 of them.
  int64_t expected_whole = 0;
  for (int parts = 2; parts <= kMaxParts; ++parts) {
    expected_whole += (parts & -parts) - 1;
  }
  EXPECT_EQ(whole, expected_whole);
}

TEST(BlockIsSplit, TheModularTestMatchesTheDefinition) {
  // The derivation (0 < g * P mod 2^64 < P) against boundaries computed by
  // PartStart, on blocks that are split, whole, and neighbours.
  std::vector<uint64_t> blocks = {
      0, 1, 2, kLastBlock, kLastBlock - 1, uint64_t{1} << 63};
  for (const Boundary& b : SampleBoundaries(60, 14)) {
    blocks.insert(blocks.end(), {b.block - 1, b.block, b.block + 1});
  }
  std::mt19937_64 rng(15);
  for (int i = 0; i < 20; ++i) blocks.push_back(rng());
  for (uint64_t block : blocks) {
    ASSERT_EQ(testing_only::BlockIsSplitBruteForce(block),
              SplitByDefinition(block))
        << std::hex << block;
    ASSERT_EQ(BlockIsSplit(block), SplitByDefinition(block))
        << std::hex << block;
  }
}

TEST(BlockIsSplit, KnownBlocksAreSplitOnlyWhereABoundaryFallsInside) {
  const struct {
    uint64_t block;
    bool split;
    const char* why;
  } cases[] = {
      {0, false, "the first block: every boundary is 2^116 or more"},
      {kLastBlock, false, "the last block: every boundary is 2^116 below"},
      {0x5555555555555555, true, "holds 1/3 = 0x5555...5555"},
      {0x5555555555555554, false, "just below 1/3"},
      {0x5555555555555556, false, "just above 1/3"},
      {0xaaaaaaaaaaaaaaaa, true, "holds 2/3 = 0xaaaa...aaaa"},
      {0x8000000000000000, false, "1/2 is its first id"},
      {0x7fffffffffffffff, false, "ends just below 1/2"},
      {0x0010000000000000, false, "1/4096 is its first id"},
      {0x000fffffffffffff, false, "ends just below 1/4096"},
      {0x0010010010010010, true, "holds 1/4095 = 0x0010 0100 1001 0010 ..."},
      {0xfff0000000000000, false, "4095/4096 is its first id"},
      {0x3333333333333333, true, "holds 1/5"},
      {0x6666666666666666, true, "holds 2/5"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(BlockIsSplit(c.block), c.split) << c.why;
    EXPECT_EQ(testing_only::BlockIsSplitBruteForce(c.block), c.split) << c.why;
  }
}

TEST(BlockIsSplit, PowerOfTwoPartCountsSplitNoBlock) {
  // Their boundaries p * 2^(128 - k) are multiples of 2^64: block starts.
  for (int k = 1; k <= 12; ++k) {
    const int parts = 1 << k;
    for (int p = 1; p < parts; p += 1 + parts / 64) {
      const Boundary b = BoundaryOf(p, parts);
      EXPECT_FALSE(b.splits);
      EXPECT_FALSE(BlockIsSplit(b.block)) << p << " of " << parts;
    }
  }
}

// Whether the block's first and last ids are in one part for `parts`.
bool InOnePart(uint64_t block, int parts) {
  return PartOf(BlockStart(block), parts) == PartOf(BlockLast(block), parts);
}

TEST(KeyBlock, NeverChoosesASplitBlockNearABoundary) {
  for (const Boundary& b : SampleBoundaries(300, 16)) {
    SCOPED_TRACE(testing::Message() << "p " << b.p << " of " << b.parts);
    for (uint64_t hash : {b.block - 1, b.block, b.block + 1}) {
      const uint64_t block = KeyBlockFromHash(hash);
      EXPECT_EQ(block, hash + (BlockIsSplit(hash) ? 1 : 0));
      EXPECT_FALSE(testing_only::BlockIsSplitBruteForce(block))
          << std::hex << hash;
      EXPECT_TRUE(InOnePart(block, b.parts)) << std::hex << hash;
      for (int parts : kPartCounts) {
        EXPECT_TRUE(InOnePart(block, parts)) << parts << " parts";
      }
    }
  }
  EXPECT_EQ(KeyBlockFromHash(kLastBlock), kLastBlock);
  EXPECT_EQ(KeyBlockFromHash(0), 0u);
  EXPECT_EQ(KeyBlockFromHash(0x5555555555555555), 0x5555555555555556u);
}

TEST(KeyBlock, PutsEachKeysItemsInOnePartForEveryPartCount) {
  std::vector<std::string> keys = {"", "k0", "user-7", "Z\xc3\xbcrich"};
  for (int i = 0; i < 2000; ++i) keys.push_back("key-" + std::to_string(i));
  for (const std::string& key : keys) {
    SCOPED_TRACE(key);
    const uint64_t block = KeyBlock(key);
    EXPECT_EQ(block, KeyBlockFromHash(KeyHash(key)));
    const Uuid128 first = KeyedItemId(block, 0, 0);
    const Uuid128 last = KeyedItemId(block, ~uint64_t{0}, 0xffff);
    for (int parts : kPartCounts) {
      ASSERT_TRUE(InOnePart(block, parts)) << parts << " parts";
      ASSERT_EQ(PartOf(first, parts), PartOf(last, parts));
      ASSERT_EQ(PartOf(first, parts), PartOf(BlockStart(block), parts));
    }
  }
}

TEST(KeyBlock, CostPerKeyIsPrinted) {
  constexpr int kKeys = 200000;
  std::vector<std::string> keys;
  keys.reserve(kKeys);
  for (int i = 0; i < kKeys; ++i) keys.push_back("user-" + std::to_string(i));
  uint64_t sink = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& key : keys) sink += KeyBlock(key);
  const auto middle = std::chrono::steady_clock::now();
  for (const std::string& key : keys) sink += KeyHash(key);
  const auto end = std::chrono::steady_clock::now();
  const auto ns = [](auto d) {
    return std::chrono::duration<double, std::nano>(d).count() / kKeys;
  };
  std::printf("KeyBlock: %.1f ns/key (KeyHash alone %.1f ns/key) [%" PRIu64
              "]\n",
              ns(middle - start), ns(end - middle), sink & 1);
}

TEST(KeyedItemId, LaysOutBlockTimeAndNoise) {
  EXPECT_EQ(KeyedItemId(0x0123456789abcdef, 1, 2),
            absl::MakeUint128(0x0123456789abcdef, (uint64_t{1} << 12) | 2));
  EXPECT_EQ(KeyedItemId(kLastBlock, kLastTime, 0xfff), absl::Uint128Max());
  EXPECT_EQ(KeyedItemId(0, 0, 0), 0);
  // Noise beyond 12 bits is dropped.
  EXPECT_EQ(KeyedItemId(5, kNov2026, 0xffff), KeyedItemId(5, kNov2026, 0xfff));
}

TEST(KeyedItemId, StaysInItsBlockAndRisesWithTimeWhateverTheNoise) {
  for (uint64_t block : {uint64_t{0}, uint64_t{0x5555555555555556},
                         KeyBlock("user-7"), kLastBlock}) {
    SCOPED_TRACE(block);
    for (uint64_t t : {uint64_t{0}, kNov2026, kLastTime - 1}) {
      const Uuid128 late = KeyedItemId(block, t + 1, 0);
      const Uuid128 early = KeyedItemId(block, t, 0xffff);
      EXPECT_LT(early, late);
      for (const Uuid128 id : {early, late}) {
        EXPECT_EQ(BlockOf(id), block);
        EXPECT_GE(id, BlockStart(block));
        EXPECT_LE(id, BlockLast(block));
      }
    }
  }
}

TEST(KeyedItemId, ClampsTimesPastTheField) {
  EXPECT_EQ(KeyedItemId(9, ~uint64_t{0}, 7), KeyedItemId(9, kLastTime, 7));
  EXPECT_EQ(KeyedItemId(9, kLastTime + 1, 7), KeyedItemId(9, kLastTime, 7));
  EXPECT_GT(KeyedItemId(9, ~uint64_t{0}, 0), KeyedItemId(9, kNov2026, 0xfff));
  EXPECT_EQ(BlockOf(KeyedItemId(9, ~uint64_t{0}, 0xffff)), 9u);
}

}  // namespace
}  // namespace sqlgroup
