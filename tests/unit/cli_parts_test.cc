// The pure parts of the CLI: handler specs and describe output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/describe_format.h"
#include "cli/handlers.h"

namespace sqlgroup::cli {
namespace {

using ::testing::HasSubstr;

TEST(HandlerSpec, EveryFormParses) {
  EXPECT_EQ(ParseHandlerSpec("noop")->kind, HandlerSpec::Kind::kNoop);
  EXPECT_EQ(ParseHandlerSpec("count")->kind, HandlerSpec::Kind::kCount);
  EXPECT_EQ(ParseHandlerSpec("count:20ms")->sleep, absl::Milliseconds(20));
  EXPECT_EQ(ParseHandlerSpec("sleep:1.5s")->sleep, absl::Milliseconds(1500));
  EXPECT_DOUBLE_EQ(ParseHandlerSpec("fail:0.25")->fail_rate, 0.25);
}

TEST(HandlerSpec, MalformedSpecsNameTheAcceptedForms) {
  for (const char* bad : {"", "nop", "noop:1", "sleep", "sleep:soon",
                          "sleep:-1s", "fail:2", "fail:x", "count:x"}) {
    const auto spec = ParseHandlerSpec(bad);
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(spec.status().message(), HasSubstr("use noop, count")) << bad;
  }
}

TEST(DescribeFormat, JsonEscapesAndCarriesEveryField) {
  GroupDescription d;
  d.config = {.name = "g", .parts = 1};
  d.members.push_back({.session_id = "s1", .instance = "a\"b\n", .pid = 7});
  d.parts.push_back(
      {.part = 0, .owner_session = "s1", .epoch = 3, .waiting_items = 5});
  const std::string json = DescriptionJson(d);
  EXPECT_THAT(json, HasSubstr(R"("instance":"a\"b\n")"));
  EXPECT_THAT(json, HasSubstr(R"("part_count":1)"));
  EXPECT_THAT(json, HasSubstr(R"("owner":"s1","instance":"","epoch":3,)"
                              R"("lag_items":5)"));
  EXPECT_EQ(JsonString(std::string("\x01", 1)), "\"\\u0001\"");
}

TEST(DescribeFormat, TextShowsUnownedPartsAsDashes) {
  GroupDescription d;
  d.config = {.name = "g", .parts = 1};
  d.parts.push_back({.part = 0});
  const std::string text = DescriptionText(d);
  EXPECT_THAT(text, HasSubstr("(none)"));
  EXPECT_THAT(text, HasSubstr("TOTAL LAG 0"));
}

}  // namespace
}  // namespace sqlgroup::cli
