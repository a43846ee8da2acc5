#include "md5.h"

#include <cstring>

namespace sqlgroup {
namespace {

// T[i] = floor(2^32 * |sin(i + 1)|), RFC 1321 section 3.4,
// four lines a round.
// clang-format off
constexpr uint32_t kSine[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee,
    0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be,
    0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa,
    0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
    0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c,
    0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05,
    0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039,
    0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1,
    0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
};
// clang-format on

// Left-rotation amounts: four per round, used in turn.
constexpr int kShift[4][4] = {
    {7, 12, 17, 22}, {5, 9, 14, 20}, {4, 11, 16, 23}, {6, 10, 15, 21}};

constexpr uint32_t RotateLeft(uint32_t x, int n) {
  return (x << n) | (x >> (32 - n));
}

uint32_t LoadLittleEndian32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
         uint32_t{p[3]} << 24;
}

// The auxiliary function of round `Round` (0..3): F, G, H, I.
template <int Round>
uint32_t Mix(uint32_t b, uint32_t c, uint32_t d) {
  if constexpr (Round == 0) return (b & c) | (~b & d);  // b ? c : d
  if constexpr (Round == 1) return (b & d) | (c & ~d);  // d ? b : c
  if constexpr (Round == 2) return b ^ c ^ d;
  if constexpr (Round == 3) return c ^ (b | ~d);
}

// The 16 steps of round `Round`: step i is the RFC's [abcd k s i] with the
// words renamed after each step ([dabc ...], [cdab ...], [bcda ...]).
template <int Round>
void Steps(uint32_t& a, uint32_t& b, uint32_t& c, uint32_t& d,
           const uint32_t x[16]) {
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    const int i = 16 * Round + j;
    const int k = Round == 0   ? j
                  : Round == 1 ? (5 * j + 1) % 16
                  : Round == 2 ? (3 * j + 5) % 16
                               : (7 * j) % 16;
    const uint32_t next =
        b + RotateLeft(a + Mix<Round>(b, c, d) + x[k] + kSine[i],
                       kShift[Round][j % 4]);
    a = d;
    d = c;
    c = b;
    b = next;
  }
}

// One 64-byte block into the state (A, B, C, D), RFC 1321 section 3.4.
void Compress(uint32_t state[4], const uint8_t* block) {
  uint32_t x[16];
  for (int i = 0; i < 16; ++i) x[i] = LoadLittleEndian32(block + 4 * i);
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  Steps<0>(a, b, c, d, x);
  Steps<1>(a, b, c, d, x);
  Steps<2>(a, b, c, d, x);
  Steps<3>(a, b, c, d, x);
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
}

}  // namespace

std::array<uint8_t, 16> Md5(std::string_view bytes) {
  uint32_t state[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t size = bytes.size();
  size_t done = 0;
  for (; size - done >= 64; done += 64) Compress(state, data + done);

  // The rest, a 0x80 byte, zeros up to 56 mod 64, then the length in bits
  // as 64 bits little-endian: one block, or two when the rest is 56 bytes
  // or more.
  uint8_t tail[128] = {};
  const size_t rest = size - done;
  if (rest > 0) std::memcpy(tail, data + done, rest);
  tail[rest] = 0x80;
  const size_t tail_size = rest < 56 ? 64 : 128;
  const uint64_t bit_length = static_cast<uint64_t>(size) * 8;  // mod 2^64
  for (int i = 0; i < 8; ++i) {
    tail[tail_size - 8 + i] = static_cast<uint8_t>(bit_length >> (8 * i));
  }
  Compress(state, tail);
  if (tail_size == 128) Compress(state, tail + 64);

  std::array<uint8_t, 16> digest;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      digest[4 * i + j] = static_cast<uint8_t>(state[i] >> (8 * j));
    }
  }
  return digest;
}

}  // namespace sqlgroup
