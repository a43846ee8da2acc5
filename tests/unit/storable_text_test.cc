// StorableText: what a member writes as last_error is text PostgreSQL
// stores, and holds no URL's password.
#include "store/storable_text.h"

#include <gtest/gtest.h>

namespace sqlgroup::store {
namespace {

TEST(StorableText, WellFormedUtf8IsKeptAsItIs) {
  const std::string text = "échec: ключ 名前 \xF0\x9F\x98\x80 (U+1F600)";
  EXPECT_EQ(StorableText(text), text);
}

TEST(StorableText, BytesPostgresRefusesBecomeQuestionMarks) {
  EXPECT_EQ(StorableText(std::string("a\0b", 3)), "a?b");
  EXPECT_EQ(StorableText("\xff\xfe ok"), "?? ok");
  EXPECT_EQ(StorableText("\xC0\xAF"), "??");            // overlong '/'
  EXPECT_EQ(StorableText("\xED\xA0\x80"), "???");       // a surrogate
  EXPECT_EQ(StorableText("\xF4\x90\x80\x80"), "????");  // past U+10FFFF
  EXPECT_EQ(StorableText("cut \xE2\x82"), "cut ??");    // truncated
}

TEST(StorableText, AUrlsPasswordIsMasked) {
  const std::string stored =
      StorableText("POST https://bot:s3cret@hooks.example.com/x failed");
  EXPECT_EQ(stored.find("s3cret"), std::string::npos) << stored;
  EXPECT_NE(stored.find("hooks.example.com"), std::string::npos) << stored;
}

}  // namespace
}  // namespace sqlgroup::store
