// MD5 (src/md5.h) against RFC 1321's test suite and inputs around its
// padding edges: key placement depends on it matching PostgreSQL's md5().
#include "md5.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>

namespace sqlgroup {
namespace {

std::string Hex(const std::array<uint8_t, 16>& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t byte : digest) {
    out += kHex[byte >> 4];
    out += kHex[byte & 0xf];
  }
  return out;
}

// "abc...zab...", `size` letters.
std::string Letters(size_t size) {
  std::string out;
  for (size_t i = 0; i < size; ++i) out += static_cast<char>('a' + i % 26);
  return out;
}

struct DigestCase {
  std::string input;
  const char* md5_hex;  // from Python's hashlib, = PostgreSQL's md5()
};

TEST(Md5, MatchesTheRfc1321TestSuite) {
  const DigestCase cases[] = {
      {"", "d41d8cd98f00b204e9800998ecf8427e"},
      {"a", "0cc175b9c0f1b6a831c399e269772661"},
      {"abc", "900150983cd24fb0d6963f7d28e17f72"},
      {"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
      {"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"},
      {"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
       "d174ab98d277d9f5a5611c2c9f419d9f"},
      {"1234567890123456789012345678901234567890"
       "1234567890123456789012345678901234567890",
       "57edf4a22be3c955ac49da2e2107b67a"},
  };
  for (const DigestCase& c : cases) {
    EXPECT_EQ(Hex(Md5(c.input)), c.md5_hex) << '"' << c.input << '"';
  }
}

TEST(Md5, PadsInputsAroundTheBlockEdgesAndSpansManyBlocks) {
  // 55 bytes leave room for the length in one block, 56 do not; 64 and 128
  // end on a block edge; the rest straddle one.
  const struct {
    size_t size;
    const char* md5_hex;
  } cases[] = {
      {55, "0d7ae056b2f015cd7dc67494efd658f1"},
      {56, "31fcfb5165169eb55898e7e4cf34d19a"},
      {63, "1b30c0670c15e7da3c2ba7bce77ebe99"},
      {64, "a2eaf6295c32adc403865fd96a2f182b"},
      {65, "eba2cce0ca8df47e62414a736b3105a2"},
      {119, "b05187e08da41fa3ef16bd56afaafd99"},
      {120, "62af9b597a9f55e16ab2b897387fc052"},
      {128, "3e8c1ccbd71838ef3df4b72e57fb9bf6"},
      {1000, "303fb697b589019cb3edba04b794e575"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(Hex(Md5(Letters(c.size))), c.md5_hex) << c.size << " bytes";
  }
  EXPECT_EQ(Hex(Md5(std::string(1000000, 'a'))),
            "7707d6ae4e027c70eea2a935c2296f21");
}

TEST(Md5, HashesEveryByteValueIncludingZero) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  EXPECT_EQ(Hex(Md5(all)), "e2c865db4162bed963bfaa9ef6ac18f0");
  EXPECT_EQ(Hex(Md5(std::string(1, '\0'))), "93b885adfe0da089cdf634904fd59f71");
}

}  // namespace
}  // namespace sqlgroup
