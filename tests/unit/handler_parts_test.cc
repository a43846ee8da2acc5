// The pure parts of consume's real handlers: spec parsing, the exec line
// protocol's verdicts, HTTP statuses, the item's JSON, command-line
// splitting and the batch SQL handler's arrays.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "cli/handlers/exec_handler.h"
#include "cli/handlers/handler_spec.h"
#include "cli/handlers/http_handler.h"
#include "cli/handlers/in_flight_calls.h"
#include "cli/handlers/item_json.h"
#include "cli/handlers/line_child.h"
#include "cli/handlers/sql_handler.h"

namespace sqlgroup::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// HasUnreadOutput once the child's extra line has arrived.
bool WaitForUnread(LineChild& child) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!child.HasUnreadOutput()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

TEST(HandlerSpec, SqlTakesAStatementOrAFunctionName) {
  auto spec = ParseHandlerSpec("sql:app.pay_order");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->kind, HandlerSpec::Kind::kSql);
  EXPECT_EQ(spec->target, "SELECT app.pay_order($1, $2, $3)");
  EXPECT_EQ(ParseHandlerSpec("sql:handle")->target,
            "SELECT handle($1, $2, $3)");
  // A colon inside the statement is the statement's.
  EXPECT_EQ(ParseHandlerSpec("sql:SELECT $2::bytea")->target,
            "SELECT $2::bytea");
  EXPECT_EQ(ParseHandlerSpec("sql:  ").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HandlerSpec, ExecFindsItsProgramFirst) {
  auto spec = ParseHandlerSpec("exec:sh -c 'read x; echo ok'");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, HandlerSpec::Kind::kExec);
  EXPECT_THAT(spec->command, ElementsAre("sh", "-c", "read x; echo ok"));
  for (const char* bad : {"exec:no-such-program-here", "exec:/nonexistent/x",
                          "exec:", "exec:'unterminated"}) {
    const auto s = ParseHandlerSpec(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.status().message(), HasSubstr("--handler=exec:")) << bad;
  }
  EXPECT_THAT(ParseHandlerSpec("exec:no-such-program-here").status().message(),
              HasSubstr("no program named no-such-program-here in $PATH"));
}

TEST(HandlerSpec, HttpNeedsAnHttpUrlWithAHost) {
  for (const char* good :
       {"http://127.0.0.1:8080/items", "https://example.com/hook?x=1"}) {
    auto spec = ParseHandlerSpec(good);
    ASSERT_TRUE(spec.ok()) << good << spec.status();
    EXPECT_EQ(spec->kind, HandlerSpec::Kind::kHttp);
    EXPECT_EQ(spec->target, good);
  }
  for (const char* bad : {"http://", "https://:80/x", "http://exa mple/"}) {
    const auto s = ParseHandlerSpec(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.status().message(), HasSubstr("give an http or https URL"))
        << bad;
  }
  // Not http(s) at all: the list of what is accepted.
  EXPECT_THAT(ParseHandlerSpec("ftp://host/x").status().message(),
              HasSubstr("an http:// or https:// URL"));
}

TEST(ReadHeaderFile, ReadsHeadersAndNamesABadLineWithoutItsValue) {
  const std::string path = ::testing::TempDir() + "/handler-headers-test";
  {
    std::ofstream out(path);
    out << "# a comment\n\nAuthorization: Bearer s3cr3t\r\nX-Team: ops\n";
  }
  auto headers = ReadHeaderFile(path);
  ASSERT_TRUE(headers.ok()) << headers.status();
  EXPECT_THAT(*headers, ::testing::ElementsAre("Authorization: Bearer s3cr3t",
                                               "X-Team: ops"));
  {
    std::ofstream out(path);
    out << "X-Ok: 1\nBearer s3cr3t\n";
  }
  headers = ReadHeaderFile(path);
  ASSERT_FALSE(headers.ok());
  EXPECT_THAT(headers.status().message(),
              ::testing::HasSubstr("line 2 is not a header"));
  EXPECT_THAT(headers.status().message(),
              ::testing::Not(::testing::HasSubstr("s3cr3t")));
  std::remove(path.c_str());
  EXPECT_FALSE(ReadHeaderFile(path).ok());
}

TEST(ExecVerdict, FollowsTheLineProtocol) {
  EXPECT_TRUE(ExecVerdict("ok").ok());
  const absl::Status retry = ExecVerdict("retry database busy");
  EXPECT_FALSE(retry.ok());
  EXPECT_FALSE(IsDeadLetterVerdict(retry));
  EXPECT_EQ(retry.message(), "database busy");
  EXPECT_FALSE(ExecVerdict("retry").ok());
  const absl::Status dead = ExecVerdict("dead\tno such order");
  EXPECT_TRUE(IsDeadLetterVerdict(dead));
  EXPECT_EQ(dead.message(), "no such order");
  EXPECT_TRUE(IsDeadLetterVerdict(ExecVerdict("dead")));
  for (const char* other : {"", "OK", "okay", "retrying", "deadline", "1"}) {
    const absl::Status s = ExecVerdict(other);
    EXPECT_FALSE(s.ok()) << other;
    EXPECT_FALSE(IsDeadLetterVerdict(s)) << other;
    EXPECT_THAT(s.message(), HasSubstr("not a verdict")) << other;
  }
}

TEST(HttpVerdict, SuccessRetryOrDeadByStatus) {
  for (long ok : {200, 201, 204, 299}) EXPECT_TRUE(HttpVerdict(ok, "").ok());
  // The endpoint's fault (down, busy, misconfigured) is retried ...
  for (long retry :
       {408, 425, 429, 500, 502, 503, 504, 301, 100, 401, 403, 404, 405}) {
    const absl::Status s = HttpVerdict(retry, "busy");
    EXPECT_FALSE(s.ok()) << retry;
    EXPECT_FALSE(IsDeadLetterVerdict(s)) << retry;
  }
  EXPECT_THAT(HttpVerdict(401, "").message(), HasSubstr("credentials"));
  // ... the request's is dead at once.
  for (long dead : {400, 409, 410, 413, 415, 422}) {
    EXPECT_TRUE(IsDeadLetterVerdict(HttpVerdict(dead, ""))) << dead;
  }
  EXPECT_EQ(HttpVerdict(422, "bad\norder\n").message(),
            "the endpoint answered 422: bad order");
}

TEST(HttpVerdict, RetryAfterOnA429Or503SetsTheWait) {
  const absl::Time now = absl::FromUnixSeconds(784111777);  // 08:49:37
  for (long status : {429, 503}) {
    const absl::Status s = HttpVerdict(status, "busy", "2", now);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_EQ(RetryAfterOf(s), absl::Seconds(2)) << status;
    EXPECT_THAT(s.message(), HasSubstr("busy (Retry-After: 2)"));
    EXPECT_EQ(RetryAfterOf(HttpVerdict(status, "",
                                       "Sun, 06 Nov 1994 "
                                       "08:50:07 GMT",
                                       now)),
              absl::Seconds(30))
        << status;
  }
  // Other statuses ignore it; so does a value that is neither form.
  EXPECT_EQ(RetryAfterOf(HttpVerdict(500, "", "2", now)), std::nullopt);
  EXPECT_EQ(RetryAfterOf(HttpVerdict(408, "", "2", now)), std::nullopt);
  EXPECT_TRUE(HttpVerdict(200, "", "2", now).ok());
  const absl::Status garbled = HttpVerdict(503, "", "soon", now);
  EXPECT_EQ(garbled.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(RetryAfterOf(garbled), std::nullopt);
}

TEST(ParseRetryAfter, TakesDeltaSecondsAndHttpDates) {
  const absl::Time now = absl::FromUnixSeconds(784111777);  // 1994-11-06
  EXPECT_EQ(ParseRetryAfter("120", now), absl::Seconds(120));
  EXPECT_EQ(ParseRetryAfter(" 0 ", now), absl::ZeroDuration());
  EXPECT_EQ(ParseRetryAfter("99999999999999999999999", now),
            absl::InfiniteDuration());
  // IMF-fixdate, and the two obsolete forms RFC 9110 asks to accept.
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:49:39 GMT", now),
            absl::Seconds(2));
  EXPECT_EQ(ParseRetryAfter("Sunday, 06-Nov-94 08:49:47 GMT", now),
            absl::Seconds(10));
  EXPECT_EQ(ParseRetryAfter("Sun Nov  6 08:50:37 1994", now),
            absl::Seconds(60));
  // A date already past asks for no wait.
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:00:00 GMT", now),
            absl::ZeroDuration());
  for (const char* bad : {"", "  ", "-5", "1.5", "soon", "2 s"}) {
    EXPECT_EQ(ParseRetryAfter(bad, now), std::nullopt) << bad;
  }
}

TEST(ItemJson, CarriesEveryFieldWithThePayloadInBase64) {
  Item item;
  item.id = "0190c1a2-0000-7000-8000-000000000001";
  item.key = "user \"7\"\n";
  item.payload = std::string("\x00\xff", 2) + "hi";
  item.attempt = 2;
  item.part = 5;
  item.enqueued_at = absl::FromUnixMicros(1764081600123456);
  EXPECT_EQ(ItemJson(item),
            "{\"id\":\"0190c1a2-0000-7000-8000-000000000001\","
            "\"key\":\"user \\\"7\\\"\\n\",\"payload\":\"" +
                absl::Base64Escape(item.payload) +
                "\",\"attempt\":2,\"part\":5,"
                "\"enqueued_at\":\"2025-11-25T14:40:00.123456+00:00\"}");
  item.key.reset();
  EXPECT_THAT(ItemJson(item), HasSubstr("\"key\":null"));
}

TEST(SplitCommandLine, QuotesAndEscapesAsAShellDoes) {
  EXPECT_THAT(
      *SplitCommandLine("python3  w.py --x 'a b' \"c \\\"d\\\"\" e\\ f"),
      ElementsAre("python3", "w.py", "--x", "a b", "c \"d\"", "e f"));
  EXPECT_THAT(*SplitCommandLine("x ''"), ElementsAre("x", ""));
  EXPECT_FALSE(SplitCommandLine("  ").ok());
  EXPECT_FALSE(SplitCommandLine("a \"b").ok());
}

TEST(SqlArrays, QuoteKeysPayloadsAndIds) {
  std::vector<Item> items(3);
  items[0].key = "a\"b\\c";
  items[0].payload = "hi";
  items[0].id = "00000000-0000-0000-0000-000000000001";
  items[1].key = std::nullopt;
  items[1].payload = std::string("\x00", 1);
  items[1].id = "00000000-0000-0000-0000-000000000002";
  items[2].key = "";
  items[2].id = "00000000-0000-0000-0000-000000000003";
  EXPECT_EQ(TextArrayLiteral(items), "{\"a\\\"b\\\\c\",NULL,\"\"}");
  EXPECT_EQ(ByteaArrayLiteral(items), "{\"\\\\x6869\",\"\\\\x00\",\"\\\\x\"}");
  EXPECT_EQ(UuidArrayLiteral(items),
            "{00000000-0000-0000-0000-000000000001,"
            "00000000-0000-0000-0000-000000000002,"
            "00000000-0000-0000-0000-000000000003}");
}

TEST(LineChild, ExchangesLinesAndReportsHowItEnded) {
  auto child =
      LineChild::Start({"sh", "-c", "read a; echo \"got $a\"; read b; exit 7"});
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(*(*child)->Exchange("one", absl::Seconds(10)), "got one");
  const auto ended = (*child)->Exchange("two", absl::Seconds(10));
  EXPECT_EQ(ended.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(ended.status().message(), HasSubstr("exited with status 7"));
  EXPECT_FALSE((*child)->alive());
}

TEST(LineChild, AChildThatReadsNothingCannotBlockTheWriter) {
  // 4 MiB is far more than a pipe holds; the child never reads it.
  auto child = LineChild::Start({"sh", "-c", "sleep 60"});
  ASSERT_TRUE(child.ok());
  const auto r =
      (*child)->Exchange(std::string(4 << 20, 'x'), absl::Milliseconds(300));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("the item was not read"));
}

TEST(LineChild, ALineNoItemAskedForIsSeen) {
  auto child = LineChild::Start({"sh", "-c", "read a; echo ok; echo ok; cat"});
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(*(*child)->Exchange("one", absl::Seconds(10)), "ok");
  EXPECT_TRUE(WaitForUnread(**child));
}

TEST(LineChild, AChildGoneBeforeTheItemIsAnErrorNotASignal) {
  // This test binary does not ignore SIGPIPE: a write to a closed pipe
  // would kill it if LineChild let the signal through.
  auto child = LineChild::Start({"sh", "-c", "exec 0<&-; sleep 0.2"});
  ASSERT_TRUE(child.ok());
  absl::SleepFor(absl::Milliseconds(50));
  const auto r =
      (*child)->Exchange(std::string(1 << 20, 'x'), absl::Seconds(10));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
}

TEST(LineChild, AChildThatExitsAtOnceIsCaughtAtStart) {
  auto quits = LineChild::Start({"sh", "-c", "exit 2"});
  ASSERT_TRUE(quits.ok());
  const absl::Status s = (*quits)->StillRunningAfter(absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("exited with status 2"));
  auto waits = LineChild::Start({"cat"});
  EXPECT_TRUE((*waits)->StillRunningAfter(absl::Milliseconds(100)).ok());
  EXPECT_THAT(CheckExecCommandStarts({"python3", "/no/such/script.py"},
                                     "exec:python3 /no/such/script.py",
                                     absl::Seconds(5))
                  .message(),
              HasSubstr("--handler=exec:python3 /no/such/script.py: the "
                        "handler process exited with status 2 before it was "
                        "given any item"));
}

TEST(LineChild, ASilentChildIsKilledAtTheTimeout) {
  auto child = LineChild::Start({"sh", "-c", "sleep 60"});
  ASSERT_TRUE(child.ok());
  const absl::Time start = absl::Now();
  const auto r = (*child)->Exchange("x", absl::Milliseconds(200));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_FALSE((*child)->alive());
}

TEST(LineChild, ACallCutOffKillsTheChildBeforeItsTimeout) {
  auto child = LineChild::Start({"sh", "-c", "sleep 60"});
  ASSERT_TRUE(child.ok());
  std::atomic<bool> cut{false};
  std::thread cutter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    cut = true;
  });
  const auto r = (*child)->Exchange("x", absl::Seconds(60), &cut);
  cutter.join();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE((*child)->alive());
}

TEST(InFlightCalls, ACutOffReachesTheCallsOnThosePartsOnly) {
  InFlightCalls calls;
  InFlightCalls::Call on_2(&calls, "s1", 2);
  InFlightCalls::Call other_member(&calls, "s2", 5);
  {
    InFlightCalls::Call on_5(&calls, "s1", 5);  // the thread's current call
    EXPECT_EQ(InFlightCalls::Call::Current(), &on_5);
    EXPECT_EQ(calls.CutOff("s1", {5, 7}), 1);
    EXPECT_TRUE(on_5.cut().load());
    EXPECT_TRUE(CutOffNow());
    EXPECT_EQ(calls.CutOff("s1", {5}), 0);  // cut off already
  }
  // The calls around it: current again, and not cut off; the same part
  // under another member's session neither.
  EXPECT_EQ(InFlightCalls::Call::Current(), &other_member);
  EXPECT_FALSE(CutOffNow());
  EXPECT_FALSE(on_2.cut().load());
  EXPECT_EQ(calls.CutOff("s1", {5}), 0);  // ended calls are forgotten
  EXPECT_EQ(calls.CutOffAll(), 2);
  EXPECT_TRUE(CutOffNow());
  EXPECT_TRUE(on_2.cut().load());
}

}  // namespace
}  // namespace sqlgroup::cli
