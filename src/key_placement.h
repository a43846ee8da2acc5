// Where the items of one key go in the key space: every item of a key gets
// an id in the key's 64-bit block (2^64 ids chosen from the MD5 of the key),
// a block that no part boundary cuts for any part count 1..4096. So all of a
// key's items are in one part whatever the group's part count, and within
// the block their ids rise with the enqueue time:
//   Uuid128 id = KeyedItemId(KeyBlock("user-7"), now_unix_micros, noise);
//   // PartOf(id, parts) == PartOf(BlockStart(KeyBlock("user-7")), parts)
// The SQL side computes the same ids from the same rules (the contract is
// spelt out below). Pure and thread-safe.
#ifndef SQLGROUP_KEY_PLACEMENT_H_
#define SQLGROUP_KEY_PLACEMENT_H_

#include <cstdint>
#include <string_view>

#include "keyspace.h"
#include "sqlgroup/item.h"

namespace sqlgroup {

// The low 64 bits of a keyed item's id: the enqueue time in microseconds
// since the Unix epoch (clamped to 2^52 - 1, the year 2112), then noise.
inline constexpr int kKeyedTimeBits = 52;
inline constexpr int kKeyedNoiseBits = 12;
static_assert(kKeyedTimeBits + kKeyedNoiseBits == 64);

// The first 8 bytes of MD5(key) read big-endian: the first 16 hex digits of
// PostgreSQL's md5(key) for a key stored as UTF-8. `key` is hashed exactly
// as given (no normalisation).
uint64_t KeyHash(std::string_view key);

// Whether block `block` (the ids [block * 2^64, (block + 1) * 2^64)) holds a
// part boundary floor(p * 2^128 / P), 1 <= p < P <= kMaxParts, strictly
// inside it. A boundary at the block's first id does not split it. Exact
// for every block; about 20 integer steps at most.
bool BlockIsSplit(uint64_t block);

// The block of a key's items: KeyHash(key), or the next block when that one
// is split. The next block is then never split (boundaries of part counts
// up to 4096 lie at least 2^104 apart), and the last block never is, so the
// sum cannot overflow.
uint64_t KeyBlock(std::string_view key);
// The same rule from the hash: KeyBlock(key) == KeyBlockFromHash(KeyHash(key)).
uint64_t KeyBlockFromHash(uint64_t hash);

// The first and last ids of a block: block << 64, (block << 64) | (2^64 - 1).
Uuid128 BlockStart(uint64_t block);
Uuid128 BlockLast(uint64_t block);
// The block an id belongs to: id >> 64.
uint64_t BlockOf(Uuid128 id);

// Where an item read from the items table lies in the key space: its id,
// which the runtime carries as the text the store read (Item::id), parsed
// here and nowhere else. A claimed item's id is always UUID text.
Uuid128 PositionOf(const Item& item);
// The block of the item's key (or of its run of unkeyed items).
inline uint64_t BlockOf(const Item& item) { return BlockOf(PositionOf(item)); }

// The id of a keyed item: (block << 64) | (min(unix_micros, 2^52 - 1) << 12)
// | (noise & 0xfff). Inside the block; of two items of one block, the later
// time has the larger id whatever the noise.
Uuid128 KeyedItemId(uint64_t block, uint64_t unix_micros, uint16_t noise);

namespace testing_only {
// BlockIsSplit by trying every part count 1..kMaxParts: a slow reference
// for tests.
bool BlockIsSplitBruteForce(uint64_t block);
}  // namespace testing_only

}  // namespace sqlgroup

#endif  // SQLGROUP_KEY_PLACEMENT_H_
