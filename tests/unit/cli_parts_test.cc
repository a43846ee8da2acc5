// The pure parts of the CLI: handler specs, numbered payloads, the
// ordering setting and describe output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "cli/describe_format.h"
#include "cli/handlers/handler_spec.h"
#include "cli/numbered_items.h"

namespace sqlgroup::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
    EXPECT_THAT(spec.status().message(), HasSubstr("use sql:STATEMENT")) << bad;
    EXPECT_THAT(spec.status().message(), HasSubstr("noop, count")) << bad;
  }
}

TEST(FailRate, OnlyProbabilitiesAreAccepted) {
  for (double ok : {0.0, 0.05, 1.0}) EXPECT_TRUE(CheckFailRate(ok).ok()) << ok;
  for (double bad : {-0.1, 1.5, std::nan("")}) {
    const absl::Status s = CheckFailRate(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("--fail_rate=")) << bad;
    EXPECT_THAT(s.message(), HasSubstr("from 0 to 1")) << bad;
  }
}

TEST(NumberedItems, PayloadsBeginWithTheNumberAndArePaddedToTheSize) {
  struct Case {
    int64_t seq;
    size_t bytes;
    const char* payload;
  };
  const Case cases[] = {
      {7, 16, "7 xxxxxxxxxxxxxx"},
      {1, 0, "1"},
      {12, 2, "12"},
      {12, 3, "12 "},
      {12345, 3, "12345"},
      {10, 4, "10 x"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(SequencedPayload(c.seq, c.bytes), c.payload) << c.seq;
    EXPECT_EQ(PayloadSequence(c.payload), c.seq) << c.payload;
  }
}

TEST(NumberedItems, PayloadsThatDoNotBeginWithADigitAreUnnumbered) {
  for (const char* p : {"", "x", "demo", " 1", "-1", "99999999999999999999"}) {
    EXPECT_EQ(PayloadSequence(p), std::nullopt) << p;
  }
  EXPECT_EQ(PayloadSequence(std::string("42\0\xff", 4)), 42);
}

TEST(Ordering, NamesRoundTripAndAnythingElseIsRefusedNamingTheChoices) {
  for (Ordering o : {Ordering::kKey, Ordering::kNone}) {
    EXPECT_EQ(ParseOrdering(OrderingName(o)).value(), o);
  }
  EXPECT_STREQ(OrderingName(Ordering::kKey), "key");
  EXPECT_EQ(GroupConfig().ordering, Ordering::kKey);
  for (const char* bad : {"", "Key", "fifo", "none "}) {
    const auto o = ParseOrdering(bad);
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(o.status().message(), HasSubstr("use key")) << bad;
    EXPECT_THAT(o.status().message(), HasSubstr("or none")) << bad;
  }
}

TEST(DescribeFormat, EveryFormShowsTheOrdering) {
  GroupDescription d;
  d.config = {.name = "g", .parts = 1, .ordering = Ordering::kNone};
  EXPECT_THAT(DescriptionText(d), HasSubstr("GROUP g  parts=1  ordering=none"));
  EXPECT_THAT(DescriptionJson(d), HasSubstr(R"("ordering":"none")"));
  const std::vector<GroupConfig> groups = {
      {.name = "a", .parts = 2},
      {.name = "b", .parts = 3, .ordering = Ordering::kNone}};
  const std::string list = GroupListText(groups);
  EXPECT_THAT(list, HasSubstr("ORDERING"));
  EXPECT_THAT(list, ::testing::ContainsRegex("a +2  key "));
  EXPECT_THAT(list, ::testing::ContainsRegex("b +3  none "));
  EXPECT_THAT(GroupListJson(groups),
              HasSubstr(R"("group":"b","parts":3,"ordering":"none")"));
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

TEST(DescribeFormat, EveryFormShowsBlockedKeysPerPartAndTheGroupsTotal) {
  GroupDescription d;
  d.config = {.name = "g", .parts = 3};
  d.parts.push_back(
      {.part = 0, .blocked_keys = 2, .oldest_blocked_age = absl::Seconds(5)});
  d.parts.push_back({.part = 1, .revoking_for = absl::Seconds(7)});
  d.parts.push_back(
      {.part = 2, .blocked_keys = 3, .oldest_blocked_age = absl::Seconds(9)});
  const std::string text = DescriptionText(d);
  EXPECT_THAT(text,
              ::testing::ContainsRegex("OLDEST_S +BLOCKED +REVOKING_S\n"));
  EXPECT_THAT(text, ::testing::ContainsRegex("\n +0 +- .* +2 +-\n"));
  EXPECT_THAT(text, ::testing::ContainsRegex("\n +1 +- .* +0 +7.000\n"));
  EXPECT_THAT(text, ::testing::ContainsRegex("\n +2 +- .* +3 +-\n"));
  EXPECT_THAT(text, HasSubstr("BLOCKED KEYS 5 (oldest blocked head 9.000s)"));
  const std::string json = DescriptionJson(d);
  EXPECT_THAT(json,
              HasSubstr(R"("blocked_keys":5,"oldest_blocked_seconds":9.000,)"));
  EXPECT_THAT(json,
              HasSubstr(R"("blocked_keys":2,"oldest_blocked_seconds":5.000,)"));
  EXPECT_THAT(json,
              HasSubstr(R"("blocked_keys":0,"oldest_blocked_seconds":0.000,)"));
  EXPECT_THAT(json, HasSubstr(R"("revoking_seconds":7.000,)"));
  EXPECT_THAT(json, HasSubstr(R"("revoking_seconds":null,)"));
}

TEST(DescribeFormat, AMemberWhoseCircuitIsOpenIsShownWithItsLastError) {
  GroupDescription d;
  d.config = {.name = "g", .parts = 1};
  MemberInfo ok{.session_id = "s1", .instance = "a"};
  MemberInfo down{.session_id = "s2", .instance = "b"};
  down.circuit_open_for = absl::Seconds(12);
  down.circuit_error = "the endpoint answered 503";
  d.members = {ok, down};
  const std::string text = DescriptionText(d);
  EXPECT_THAT(text, HasSubstr("CIRCUIT OPEN b for 12.000s"));
  EXPECT_THAT(text, HasSubstr("(last error: the endpoint answered 503)"));
  EXPECT_THAT(text, Not(HasSubstr("CIRCUIT OPEN a")));
  const std::string json = DescriptionJson(d);
  EXPECT_THAT(json,
              HasSubstr(R"("circuit_open_seconds":12.000,)"
                        R"("circuit_error":"the endpoint answered 503")"));
  EXPECT_THAT(json, HasSubstr(R"("circuit_open_seconds":null,)"
                              R"("circuit_error":null)"));
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
