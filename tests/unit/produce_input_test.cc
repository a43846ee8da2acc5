// The lines `sqlgroup produce --input` reads (cli/produce_input.h).
#include "cli/produce_input.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace sqlgroup::cli {
namespace {

TEST(ProduceInputTest, TextLinesSplitAtTheFirstDelimiter) {
  NewItem item = ParseTextLine("user-7\thello\tworld", "\t");
  ASSERT_TRUE(item.key.has_value());
  EXPECT_EQ(*item.key, "user-7");
  EXPECT_EQ(item.payload, "hello\tworld");

  item = ParseTextLine("k::v:w", "::");
  EXPECT_EQ(*item.key, "k");
  EXPECT_EQ(item.payload, "v:w");
}

TEST(ProduceInputTest, ALineWithoutAKeyIsUnkeyed) {
  NewItem item = ParseTextLine("just a payload", "\t");
  EXPECT_FALSE(item.key.has_value());
  EXPECT_EQ(item.payload, "just a payload");
  // Beginning with the delimiter: no key, the rest is the payload.
  item = ParseTextLine("\tleading", "\t");
  EXPECT_FALSE(item.key.has_value());
  EXPECT_EQ(item.payload, "leading");
  // An empty delimiter: no keys at all.
  item = ParseTextLine("a\tb", "");
  EXPECT_FALSE(item.key.has_value());
  EXPECT_EQ(item.payload, "a\tb");
  // A key with an empty payload.
  item = ParseTextLine("k\t", "\t");
  EXPECT_EQ(*item.key, "k");
  EXPECT_EQ(item.payload, "");
}

TEST(ProduceInputTest, TextKeepsEveryByteButTheNewline) {
  const std::string bytes("k\t\x01\x02\xff\r \\n", 10);
  NewItem item = ParseTextLine(bytes, "\t");
  EXPECT_EQ(item.payload, std::string("\x01\x02\xff\r \\n", 8));
}

TEST(ProduceInputTest, AKeyMustBeUtf8WithoutNul) {
  EXPECT_TRUE(CheckKeyText("user-7").ok());
  EXPECT_TRUE(CheckKeyText("caf\xc3\xa9 \xf0\x9f\x98\x80").ok());
  EXPECT_TRUE(CheckKeyText("").ok());
  EXPECT_THAT(std::string(CheckKeyText(std::string("a\0b", 3)).message()),
              ::testing::HasSubstr("NUL"));
  for (const std::string& bad :
       {std::string("\xff"), std::string("ab\xc3"), std::string("\xc0\xaf"),
        std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80")}) {
    const absl::Status s = CheckKeyText(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("not UTF-8"));
  }
}

TEST(ProduceInputTest, KeyDelimiterReadsBackslashTAsATab) {
  EXPECT_EQ(KeyDelimiter("\\t"), "\t");
  EXPECT_EQ(KeyDelimiter(":"), ":");
  EXPECT_EQ(KeyDelimiter(""), "");
}

TEST(ProduceInputTest, JsonLinesCarryKeyPayloadAndDelay) {
  auto item = ParseJsonLine(
      R"({"key": "order-1", "payload": "caf\u00e9 \"x\"", "delay": "1m30s"})");
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(*item->key, "order-1");
  EXPECT_EQ(item->payload, "caf\xc3\xa9 \"x\"");
  EXPECT_EQ(item->delay, absl::Seconds(90));

  item = ParseJsonLine(R"({"key": null, "payload": "p", "delay": 2.5})");
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_FALSE(item->key.has_value());
  EXPECT_EQ(item->delay, absl::Milliseconds(2500));

  const std::string raw("\x00\xff\n\x01", 4);
  item = ParseJsonLine(absl::StrCat(R"({"payload_base64": ")",
                                    absl::Base64Escape(raw), R"("})"));
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(item->payload, raw);
}

TEST(ProduceInputTest, AJsonLineWithoutADelayTakesTheDefault) {
  auto item = ParseJsonLine(R"({"payload": "p"})", absl::Seconds(7));
  ASSERT_TRUE(item.ok());
  EXPECT_EQ(item->delay, absl::Seconds(7));
  item = ParseJsonLine(R"({"payload": "p", "delay": 0})", absl::Seconds(7));
  ASSERT_TRUE(item.ok());
  EXPECT_EQ(item->delay, absl::ZeroDuration());
}

TEST(ProduceInputTest, BadJsonLinesSayWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"payload": "p")", "not JSON"},
      {R"(["p"])", "not a JSON object"},
      {R"({"key": 7, "payload": "p"})", "\"key\" must be a string or null"},
      {R"({"payload": 7})", "\"payload\" must be a string"},
      {R"({"payload": "a", "payload_base64": "YQ=="})", "both"},
      {R"({"payload_base64": "***"})", "not valid base64"},
      {R"({"payload": "p", "delay": "soon"})", "\"delay\" must be a duration"},
      {R"({"payload": "p", "delay": -1})", "at least 0"},
      {R"({"paylaod": "p"})", "field \"paylaod\""},
  };
  for (const auto& [line, says] : cases) {
    auto item = ParseJsonLine(line);
    ASSERT_FALSE(item.ok()) << line;
    EXPECT_EQ(item.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(item.status().message().find(says), std::string::npos)
        << line << " -> " << item.status().message();
  }
}

TEST(ProduceInputTest, FormatIsTextOrJson) {
  EXPECT_EQ(*ParseInputFormat("text"), InputFormat::kText);
  EXPECT_EQ(*ParseInputFormat("json"), InputFormat::kJson);
  auto bad = ParseInputFormat("csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--format"), std::string::npos);
}

TEST(ProduceInputTest, LineReaderReadsLinesAndALastOneWithoutNewline) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  LineReader reader(fds[0]);
  EXPECT_FALSE(reader.Ready());  // nothing written yet: Next would wait
  const std::string text = "a\tb\n\nlast";
  ASSERT_EQ(write(fds[1], text.data(), text.size()),
            static_cast<ssize_t>(text.size()));
  EXPECT_TRUE(reader.Ready());
  std::string line;
  ASSERT_TRUE(reader.Next(&line));
  EXPECT_EQ(line, "a\tb");
  EXPECT_TRUE(reader.Ready());  // "\n" is buffered
  ASSERT_TRUE(reader.Next(&line));
  EXPECT_EQ(line, "");
  close(fds[1]);
  ASSERT_TRUE(reader.Next(&line));
  EXPECT_EQ(line, "last");
  EXPECT_FALSE(reader.Next(&line));
  EXPECT_TRUE(reader.status().ok());
  close(fds[0]);
}

TEST(ProduceInputTest, LineReaderReadsLongLinesWhole) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  // Longer than a read() and than the pipe: written from a second thread.
  const std::string long_line(300000, 'x');
  std::thread writer([&] {
    const std::string text = long_line + "\nnext\n";
    size_t at = 0;
    while (at < text.size()) {
      const ssize_t n = write(fds[1], text.data() + at, text.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    close(fds[1]);
  });
  LineReader reader(fds[0]);
  std::string line;
  ASSERT_TRUE(reader.Next(&line));
  EXPECT_EQ(line, long_line);
  ASSERT_TRUE(reader.Next(&line));
  EXPECT_EQ(line, "next");
  EXPECT_FALSE(reader.Next(&line));
  writer.join();
  close(fds[0]);
}

}  // namespace
}  // namespace sqlgroup::cli
