#include "keyspace.h"

#include <cassert>

namespace sqlgroup {
namespace {

// 2^128 = q * parts + r with 0 <= r < parts, computed without overflow.
struct Split {
  Uuid128 q;
  Uuid128 r;
};

Split SplitSpace(int parts) {
  const Uuid128 p = parts;
  Uuid128 q = absl::Uint128Max() / p;
  Uuid128 r = absl::Uint128Max() % p + 1;  // 2^128 - 1 + 1 - q * p
  if (r == p) {
    q += 1;
    r = 0;
  }
  return {q, r};
}

}  // namespace

Uuid128 PartStart(int part, int parts) {
  assert(parts >= kMinParts && parts <= kMaxParts);
  assert(part >= 0 && part < parts);
  // floor(part * (q * parts + r) / parts) = part * q + floor(part * r / parts)
  // and part * r < parts^2 fits easily.
  const Split s = SplitSpace(parts);
  return part * s.q + (Uuid128(part) * s.r) / Uuid128(parts);
}

KeyRange PartRange(int part, int parts) {
  return PartsRange(part, part, parts);
}

KeyRange PartsRange(int first_part, int last_part, int parts) {
  const Uuid128 first = PartStart(first_part, parts);
  const Uuid128 last = last_part + 1 == parts
                           ? absl::Uint128Max()
                           : PartStart(last_part + 1, parts) - 1;
  return {first, last};
}

int PartOf(Uuid128 key, int parts) {
  assert(parts >= kMinParts && parts <= kMaxParts);
  // Estimate floor(key * parts / 2^128) from the high and low halves, then
  // correct by comparing against the exact starts (off by at most one).
  const Uuid128 hi = absl::Uint128High64(key);
  const Uuid128 lo = absl::Uint128Low64(key);
  const Uuid128 wide = hi * parts + ((lo * parts) >> 64);
  int p = static_cast<int>(absl::Uint128Low64(wide >> 64));
  if (p >= parts) p = parts - 1;
  while (p + 1 < parts && PartStart(p + 1, parts) <= key) ++p;
  while (p > 0 && PartStart(p, parts) > key) --p;
  return p;
}

std::string FormatUuid(Uuid128 key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(36, '-');
  int pos = 35;
  for (int nibble = 0; nibble < 32; ++nibble, --pos) {
    if (pos == 8 || pos == 13 || pos == 18 || pos == 23) --pos;
    out[pos] = kHex[absl::Uint128Low64(key) & 0xf];
    key >>= 4;
  }
  return out;
}

std::optional<Uuid128> ParseUuid(std::string_view text) {
  if (text.size() != 36) return std::nullopt;
  Uuid128 value = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return std::nullopt;
      continue;
    }
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return std::nullopt;
    }
    value = (value << 4) | Uuid128(digit);
  }
  return value;
}

bool RangesOverlap(int a, int a_parts, int b, int b_parts) {
  const int64_t A = a_parts, B = b_parts;
  return a * B < (b + 1) * A && b * A < (a + 1) * B;
}

}  // namespace sqlgroup
