#include "key_placement.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <limits>

#include "md5.h"

namespace sqlgroup {
namespace {

// Why a block is split exactly when some P has 0 < (g * P mod 2^64) < P,
// with g = (2^64 - block) mod 2^64 (all quantities integers, b = block):
//
// The boundary floor(p * 2^128 / P) lies strictly inside the block iff
//   b * 2^64 < floor(p * 2^128 / P) < (b + 1) * 2^64
//   <=> b * 2^64 + 1 <= p * 2^128 / P < (b + 1) * 2^64   (the ends are
//                                                         integers)
//   <=> P <= (p * 2^64 - P * b) * 2^64 < P * 2^64.
// With r = p * 2^64 - P * b that says 1 <= r < P (as P < 2^64). Then r is
// congruent to -P * b = P * g modulo 2^64 and lies in [0, 2^64), so it is
// g * P mod 2^64. Conversely, if r = g * P mod 2^64 is in (0, P), then
// p = (r + P * b) / 2^64 is an integer (r + P * b = P * (g + b) = 0 mod 2^64)
// with 1 <= p (r > 0) and p < P (r + P * b < P + P * (2^64 - 1)). P = 1 and
// g = 0 (block 0) never qualify: boundaries exactly at a block start are
// excluded by r > 0.
bool IsWitness(uint64_t g, uint64_t parts) {
  const uint64_t r = g * parts;  // mod 2^64
  return r != 0 && r < parts;
}

}  // namespace

uint64_t KeyHash(std::string_view key) {
  const std::array<uint8_t, 16> digest = Md5(key);
  uint64_t h = 0;
  for (int i = 0; i < 8; ++i) h = (h << 8) | digest[i];
  return h;
}

// Which P to try. With alpha = g / 2^64 and p = floor(P * alpha), a witness
// P has 0 < P * alpha - p < P / 2^64, that is 0 < alpha - p / P < 2^-64.
// Divide p and P by their gcd: p' / P' is the same fraction, so P' <= P is a
// witness too. Since 2^-64 <= 1 / (2 * P'^2) for P' <= 2^31, Legendre's
// theorem (|alpha - a / q| < 1 / (2 q^2), a / q in lowest terms, implies
// a / q is a convergent of alpha) makes p' / P' a convergent, so P' is the
// denominator q_k of a convergent, and q_k <= P <= kMaxParts. For rational
// alpha the theorem holds with the expansion whose last partial quotient is
// at least 2, which is the one Euclid's algorithm yields. So some witness
// exists iff some convergent denominator q_k <= kMaxParts is one, and each
// q_k is checked with the exact test above: no false positives either.
bool BlockIsSplit(uint64_t block) {
  const uint64_t g = 0 - block;  // (2^64 - block) mod 2^64
  if (g == 0) return false;      // alpha = 0: every boundary is above
  // alpha = [0; a_1, a_2, ...] by Euclid on (2^64, g); the denominators
  // q_k = a_k * q_{k-1} + q_{k-2} from q_{-1} = 0, q_0 = 1 (q_0 = 1 is
  // never a witness). First step: 2^64 = a_1 * g + rem, computed in 64 bits.
  uint64_t a = std::numeric_limits<uint64_t>::max() / g;
  if (a > static_cast<uint64_t>(kMaxParts)) return false;  // a_1 >= a
  uint64_t rem = std::numeric_limits<uint64_t>::max() % g + 1;
  if (rem == g) {
    ++a;
    rem = 0;
  }
  uint64_t num = g;  // the next step divides num by rem
  uint64_t q_before = 0;
  uint64_t q_last = 1;
  for (;;) {
    // a <= kMaxParts and q_last <= kMaxParts here: no overflow.
    if (a > static_cast<uint64_t>(kMaxParts)) return false;
    const uint64_t q = a * q_last + q_before;
    if (q > static_cast<uint64_t>(kMaxParts)) return false;
    if (IsWitness(g, q)) return true;
    if (rem == 0) return false;  // q was alpha's own denominator
    a = num / rem;
    const uint64_t next_rem = num % rem;
    num = rem;
    rem = next_rem;
    q_before = q_last;
    q_last = q;
  }
}

uint64_t KeyBlock(std::string_view key) {
  return KeyBlockFromHash(KeyHash(key));
}

uint64_t KeyBlockFromHash(uint64_t hash) {
  return BlockIsSplit(hash) ? hash + 1 : hash;
}

Uuid128 BlockStart(uint64_t block) { return absl::MakeUint128(block, 0); }

Uuid128 BlockLast(uint64_t block) {
  return absl::MakeUint128(block, std::numeric_limits<uint64_t>::max());
}

uint64_t BlockOf(Uuid128 id) { return absl::Uint128High64(id); }

Uuid128 KeyedItemId(uint64_t block, uint64_t unix_micros, uint16_t noise) {
  const uint64_t time =
      std::min(unix_micros, (uint64_t{1} << kKeyedTimeBits) - 1);
  const uint64_t noise_mask = (uint64_t{1} << kKeyedNoiseBits) - 1;
  return absl::MakeUint128(block,
                           (time << kKeyedNoiseBits) | (noise & noise_mask));
}

namespace testing_only {

bool BlockIsSplitBruteForce(uint64_t block) {
  const uint64_t g = 0 - block;
  for (uint64_t parts = 1; parts <= static_cast<uint64_t>(kMaxParts); ++parts) {
    if (IsWitness(g, parts)) return true;
  }
  return false;
}

}  // namespace testing_only

Uuid128 PositionOf(const Item& item) {
  const std::optional<Uuid128> id = ParseUuid(item.id);
  assert(id.has_value() && "a claimed item's id is UUID text");
  return id.value_or(0);
}

}  // namespace sqlgroup
