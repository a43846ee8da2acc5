#include "item_ids.h"

#include <algorithm>
#include <cassert>

#include "key_placement.h"

namespace sqlgroup {
namespace {

// floor(log2(v)) for v > 0.
int FloorLog2(Uuid128 v) {
  const uint64_t high = absl::Uint128High64(v);
  if (high != 0) return 127 - __builtin_clzll(high);
  return 63 - __builtin_clzll(absl::Uint128Low64(v));
}

}  // namespace

Uuid128 ItemId(int part, int parts, uint64_t unix_micros, Uuid128 noise) {
  const KeyRange range = PartRange(part, parts);
  // offset < 2^width <= last - first: the id never leaves the range. At
  // kMaxParts a range spans 2^116 keys (width 115), which leaves 63 bits
  // of noise.
  const int width = FloorLog2(range.last - range.first);
  const int noise_bits = width - kItemTimeBits;
  assert(noise_bits >= 63);
  const uint64_t time =
      std::min(unix_micros, (uint64_t{1} << kItemTimeBits) - 1);
  const Uuid128 low_mask = (Uuid128(1) << noise_bits) - 1;
  return range.first + ((Uuid128(time) << noise_bits) | (noise & low_mask));
}

std::vector<Uuid128> ItemIdGenerator::Next(int parts, size_t count,
                                           uint64_t now_unix_micros) {
  const size_t run = std::clamp<size_t>(count / static_cast<size_t>(parts), 1,
                                        static_cast<size_t>(max_run_));
  const int first_part = absl::Uniform(gen_, 0, parts);
  std::vector<Uuid128> ids;
  ids.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t micros = Tick(now_unix_micros);
    const int part = static_cast<int>((first_part + i / run) % parts);
    const Uuid128 noise = absl::MakeUint128(absl::Uniform<uint64_t>(gen_),
                                            absl::Uniform<uint64_t>(gen_));
    ids.push_back(ItemId(part, parts, micros, noise));
  }
  return ids;
}

std::vector<Uuid128> ItemIdGenerator::Next(
    int parts, const std::vector<const std::string*>& keys,
    uint64_t now_unix_micros) {
  const size_t unkeyed =
      static_cast<size_t>(std::count(keys.begin(), keys.end(), nullptr));
  std::vector<Uuid128> spread = Next(parts, unkeyed, now_unix_micros);
  std::vector<Uuid128> ids;
  ids.reserve(keys.size());
  size_t next_spread = 0;
  for (const std::string* key : keys) {
    if (key == nullptr) {
      ids.push_back(spread[next_spread++]);
      continue;
    }
    const auto noise = static_cast<uint16_t>(absl::Uniform<uint32_t>(gen_));
    ids.push_back(KeyedItemId(KeyBlock(*key), Tick(now_unix_micros), noise));
  }
  return ids;
}

uint64_t ItemIdGenerator::Tick(uint64_t now_unix_micros) {
  // Each id takes its own microsecond: ids of one call, and of calls made
  // faster than the clock ticks, keep their order.
  last_micros_ = std::max(now_unix_micros, last_micros_ + 1);
  return last_micros_;
}

}  // namespace sqlgroup
