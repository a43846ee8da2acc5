// Part <-> UUID key-range math. Part p of P covers the 128-bit keys
// [floor(p * 2^128 / P), floor((p + 1) * 2^128 / P)), exactly, for every P
// (not only powers of two); the last part ends at the top of the space.
// Pure and thread-safe.
#ifndef SQLGROUP_KEYSPACE_H_
#define SQLGROUP_KEYSPACE_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/numeric/int128.h"

namespace sqlgroup {

using Uuid128 = absl::uint128;

inline constexpr int kMinParts = 1;
inline constexpr int kMaxParts = 4096;

// Keys of one part, both ends inclusive so the last part needs no
// special case: SQL `id BETWEEN first AND last`.
struct KeyRange {
  Uuid128 first;
  Uuid128 last;
};

// floor(p * 2^128 / parts); p == parts yields 2^128, which does not fit,
// so callers ask for p in [0, parts). Requires 1 <= parts <= kMaxParts.
Uuid128 PartStart(int part, int parts);
KeyRange PartRange(int part, int parts);
// The part whose range holds `key`.
int PartOf(Uuid128 key, int parts);
// The keys of the parts [first_part, last_part] together (contiguous).
KeyRange PartsRange(int first_part, int last_part, int parts);

// Whether part a of a_parts and part b of b_parts share any key: exactly
// when a/A < (b+1)/B and b/B < (a+1)/A, so in integers (the floors of the
// bounds cannot reorder them: 2^128 / (A * B) > 1). The take of a part
// checks the same in SQL (store::RangesOverlap) against the parts of
// another part count still owned during a change of it.
bool RangesOverlap(int a, int a_parts, int b, int b_parts);

// "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lowercase.
std::string FormatUuid(Uuid128 key);
// Accepts the canonical form above in either case; nullopt otherwise.
std::optional<Uuid128> ParseUuid(std::string_view text);

}  // namespace sqlgroup

#endif  // SQLGROUP_KEYSPACE_H_
