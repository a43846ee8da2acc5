// Utf8SequenceAt against the edges of Unicode's table 3-7.
#include "utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace sqlgroup {
namespace {

size_t At0(const std::string& s) { return Utf8SequenceAt(s, 0); }

TEST(Utf8, WellFormedSequencesHaveTheirLength) {
  EXPECT_EQ(At0(std::string(1, '\0')), 1u);
  EXPECT_EQ(At0("a"), 1u);
  EXPECT_EQ(At0("\xc2\x80"), 2u);          // U+0080
  EXPECT_EQ(At0("\xe0\xa0\x80"), 3u);      // U+0800
  EXPECT_EQ(At0("\xed\x9f\xbf"), 3u);      // U+D7FF, below the surrogates
  EXPECT_EQ(At0("\xf0\x90\x80\x80"), 4u);  // U+10000
  EXPECT_EQ(At0("\xf4\x8f\xbf\xbf"), 4u);  // U+10FFFF
  EXPECT_EQ(Utf8SequenceAt("a\xc3\xa9", 1), 2u);
}

TEST(Utf8, IllFormedSequencesAreNone) {
  EXPECT_EQ(At0("\x80"), 0u);              // a continuation byte alone
  EXPECT_EQ(At0("\xc0\x80"), 0u);          // overlong NUL
  EXPECT_EQ(At0("\xc1\xbf"), 0u);          // overlong
  EXPECT_EQ(At0("\xe0\x9f\xbf"), 0u);      // overlong
  EXPECT_EQ(At0("\xed\xa0\x80"), 0u);      // a surrogate
  EXPECT_EQ(At0("\xf0\x8f\xbf\xbf"), 0u);  // overlong
  EXPECT_EQ(At0("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(At0("\xf5\x80\x80\x80"), 0u);
  EXPECT_EQ(At0("\xc3"), 0u);  // cut short
  EXPECT_EQ(At0("\xe2\x82"), 0u);
  EXPECT_EQ(At0("\xc3\x41"), 0u);  // not a continuation
}

}  // namespace
}  // namespace sqlgroup
