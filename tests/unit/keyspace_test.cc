#include "keyspace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace sqlgroup {
namespace {

// floor(part * 2^128 / parts) by long division in base 2^64: an independent
// reference for PartStart.
Uuid128 ReferenceStart(int part, int parts) {
  const Uuid128 shifted = Uuid128(part) << 64;  // part * 2^64
  const Uuid128 high = shifted / parts;
  const Uuid128 rem = shifted % parts;
  const Uuid128 low = (rem << 64) / parts;
  return (high << 64) + low;
}

// Ranges start at 0, end at the top, are contiguous and never overlap, and
// every boundary maps back to its own part.
void ExpectPartitionsTheSpace(int parts) {
  SCOPED_TRACE(parts);
  EXPECT_EQ(PartRange(0, parts).first, 0);
  EXPECT_EQ(PartRange(parts - 1, parts).last, absl::Uint128Max());
  for (int p = 0; p < parts; ++p) {
    const KeyRange r = PartRange(p, parts);
    ASSERT_EQ(r.first, ReferenceStart(p, parts)) << "part " << p;
    ASSERT_LE(r.first, r.last) << "part " << p;
    if (p + 1 < parts) {
      ASSERT_EQ(r.last + 1, PartStart(p + 1, parts)) << "part " << p;
    }
    ASSERT_EQ(PartOf(r.first, parts), p);
    ASSERT_EQ(PartOf(r.last, parts), p);
  }
}

TEST(Keyspace, EveryPartCountUpTo4096PartitionsTheSpaceExactly) {
  // All counts up to 512, then every count whose neighbours are awkward
  // (primes, powers of two and their neighbours) up to the maximum.
  for (int parts = 1; parts <= 512; ++parts) ExpectPartitionsTheSpace(parts);
  for (int parts :
       {1000, 1023, 1024, 1025, 2047, 2048, 3001, 4093, 4095, 4096}) {
    ExpectPartitionsTheSpace(parts);
  }
}

TEST(Keyspace, EveryPartCountHasExactStartsAtSampledParts) {
  std::mt19937_64 rng(42);
  for (int parts = 1; parts <= kMaxParts; ++parts) {
    for (int sample = 0; sample < 4; ++sample) {
      const int p = static_cast<int>(rng() % parts);
      ASSERT_EQ(PartStart(p, parts), ReferenceStart(p, parts))
          << p << " of " << parts;
    }
  }
}

TEST(Keyspace, PowersOfTwoSplitOnTheHighBits) {
  // With 8 parts, part 1 starts at 0x2000...; matches the seed's example.
  EXPECT_EQ(FormatUuid(PartStart(1, 8)),
            "20000000-0000-0000-0000-000000000000");
  EXPECT_EQ(FormatUuid(PartRange(0, 8).last),
            "1fffffff-ffff-ffff-ffff-ffffffffffff");
  EXPECT_EQ(PartStart(4095, 4096), Uuid128(4095) << 116);
}

TEST(Keyspace, ThreePartsSplitTheSpaceIntoNearlyEqualThirds) {
  EXPECT_EQ(FormatUuid(PartStart(1, 3)),
            "55555555-5555-5555-5555-555555555555");
  EXPECT_EQ(FormatUuid(PartStart(2, 3)),
            "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa");
}

TEST(Keyspace, RandomKeysLandInTheRangeOfTheirPart) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const int parts = 1 + static_cast<int>(rng() % kMaxParts);
    const Uuid128 key = absl::MakeUint128(rng(), rng());
    const int p = PartOf(key, parts);
    const KeyRange r = PartRange(p, parts);
    ASSERT_LE(r.first, key);
    ASSERT_GE(r.last, key);
  }
}

// The reference: two inclusive ranges share a key.
bool ReferenceOverlap(int a, int a_parts, int b, int b_parts) {
  const KeyRange x = PartRange(a, a_parts), y = PartRange(b, b_parts);
  return x.first <= y.last && y.first <= x.last;
}

TEST(Keyspace, RangesOverlapExactlyWhenTheirKeysDo) {
  // Every pair of parts for part counts up to 24, both ways round.
  for (int A = 1; A <= 24; ++A) {
    for (int B = 1; B <= 24; ++B) {
      for (int a = 0; a < A; ++a) {
        for (int b = 0; b < B; ++b) {
          ASSERT_EQ(RangesOverlap(a, A, b, B), ReferenceOverlap(a, A, b, B))
              << a << "/" << A << " vs " << b << "/" << B;
        }
      }
    }
  }
  // Random pairs up to 4096, and neighbours, where an off-by-one shows.
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) {
    const int A = 1 + static_cast<int>(rng() % kMaxParts);
    const int B = 1 + static_cast<int>(rng() % kMaxParts);
    const int a = static_cast<int>(rng() % A);
    // The parts of B around the start of part a.
    const int near = static_cast<int>(static_cast<int64_t>(a) * B / A);
    for (int b = std::max(0, near - 1); b <= std::min(B - 1, near + 1); ++b) {
      ASSERT_EQ(RangesOverlap(a, A, b, B), ReferenceOverlap(a, A, b, B))
          << a << "/" << A << " vs " << b << "/" << B;
    }
  }
  // A part of any count overlaps itself under the same count only.
  EXPECT_TRUE(RangesOverlap(3, 16, 3, 16));
  EXPECT_FALSE(RangesOverlap(3, 16, 4, 16));
  // 16 -> 64: part 1 of 16 is parts 4..7 of 64.
  for (int b = 0; b < 64; ++b) {
    EXPECT_EQ(RangesOverlap(1, 16, b, 64), b >= 4 && b <= 7) << b;
  }
}

TEST(Keyspace, BlocksOfPartsAreContiguousRanges) {
  const KeyRange block = PartsRange(2, 4, 8);
  EXPECT_EQ(block.first, PartRange(2, 8).first);
  EXPECT_EQ(block.last, PartRange(4, 8).last);
  EXPECT_EQ(PartsRange(0, 6, 7).last, absl::Uint128Max());
}

TEST(Keyspace, UuidTextRoundTripsAndRejectsMalformedInput) {
  const Uuid128 key =
      absl::MakeUint128(0x0123456789abcdefULL, 0xfedcba9876543210ULL);
  const std::string text = FormatUuid(key);
  EXPECT_EQ(text, "01234567-89ab-cdef-fedc-ba9876543210");
  EXPECT_EQ(ParseUuid(text), key);
  EXPECT_EQ(ParseUuid("01234567-89AB-CDEF-FEDC-BA9876543210"), key);
  for (const char* bad : {"", "01234567-89ab-cdef-fedc-ba987654321",
                          "01234567-89ab-cdef-fedc-ba98765432100",
                          "0123456789ab-cdef-fedc-ba9876543210-",
                          "g1234567-89ab-cdef-fedc-ba9876543210"}) {
    EXPECT_FALSE(ParseUuid(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace sqlgroup
