// SchemaWatch over the fake membership store: when a member may go on
// under the database's schema, and when its version is recorded.
#include "member/schema_watch.h"

#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "spdlog/sinks/null_sink.h"
#include "spdlog/spdlog.h"
#include "support/fake_membership_store.h"

namespace sqlgroup {
namespace {

class SchemaWatchTest : public ::testing::Test {
 protected:
  SchemaWatch Watch(absl::Duration interval = absl::Seconds(5)) {
    return SchemaWatch({.group = "g",
                        .at_start = {kSchemaVersion, kSchemaVersion},
                        .interval = interval},
                       store_, log_);
  }
  testing::FakeMembershipStore store_{4};
  std::shared_ptr<spdlog::logger> log_ = std::make_shared<spdlog::logger>(
      "t", std::make_shared<spdlog::sinks::null_sink_mt>());
};

TEST_F(SchemaWatchTest, TheSameSchemaGoesOnAndRecordsTheVersionOnce) {
  SchemaWatch watch = Watch();
  EXPECT_TRUE(watch.Due(absl::Now()));
  ASSERT_TRUE(watch.Check("s1").ok());
  ASSERT_TRUE(watch.Check("s1").ok());
  EXPECT_EQ(store_.versions_recorded, std::set<std::string>{"s1"});
  EXPECT_EQ(store_.schema_reads, 2);
}

TEST_F(SchemaWatchTest, NoSessionRecordsNothing) {
  SchemaWatch watch = Watch();
  ASSERT_TRUE(watch.Check("").ok());
  EXPECT_TRUE(store_.versions_recorded.empty());
}

TEST_F(SchemaWatchTest, ASessionThatRecordedAtRegistrationIsNotRecordedAgain) {
  SchemaWatch watch = Watch();
  ASSERT_TRUE(watch.RecordsVersion());
  watch.Joined(/*recorded=*/true);
  ASSERT_TRUE(watch.Check("s1").ok());
  EXPECT_TRUE(store_.versions_recorded.empty());
}

TEST_F(SchemaWatchTest, ASchemaThatRefusesThisBinaryStopsTheMember) {
  SchemaWatch watch = Watch();
  store_.schema = {kSchemaVersion + 5, kSchemaVersion + 1};
  const absl::Status s = watch.Check("s1");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("takes no more items and stops"),
            std::string::npos)
      << s;
  EXPECT_TRUE(store_.versions_recorded.empty());
}

TEST_F(SchemaWatchTest, AFailedReadIsReadAgainAtTheNextTurn) {
  SchemaWatch watch = Watch(absl::Hours(1));
  store_.fail_schema_read = absl::UnavailableError("connection lost");
  EXPECT_TRUE(absl::IsUnavailable(watch.Check("s1")));
  // Not an hour later: as soon as the connection is back.
  EXPECT_TRUE(watch.changed());
  EXPECT_TRUE(watch.Due(absl::Now()));
  EXPECT_FALSE(watch.Due(absl::Now()));
  ASSERT_TRUE(watch.Check("s1").ok());
  EXPECT_EQ(store_.versions_recorded.count("s1"), 1u);
}

TEST_F(SchemaWatchTest, ARoleThatMayNotRecordItsVersionGoesOn) {
  SchemaWatch watch = Watch();
  store_.fail_record_version = absl::PermissionDeniedError("no grant");
  EXPECT_TRUE(watch.Check("s1").ok());
  store_.fail_record_version = absl::UnavailableError("connection lost");
  EXPECT_TRUE(absl::IsUnavailable(watch.Check("s1")));
  EXPECT_TRUE(watch.changed());
}

TEST_F(SchemaWatchTest, ANoticeMakesACheckDueBeforeTheInterval) {
  SchemaWatch watch = Watch(absl::Hours(1));
  ASSERT_TRUE(watch.Check("s1").ok());
  EXPECT_FALSE(watch.Due(absl::Now()));
  EXPECT_GT(watch.next_check(), absl::Now() + absl::Minutes(59));
  watch.Changed();
  EXPECT_TRUE(watch.Due(absl::Now()));
}

// The workers prepare their statements for the version published: the one
// at start, then each one read that the member may run against, never
// one that stops it.
TEST_F(SchemaWatchTest, PublishesTheVersionsTheMemberRunsAgainst) {
  auto published = std::make_shared<std::atomic<int>>(0);
  SchemaWatch watch({.group = "g",
                     .at_start = {kSchemaVersion - 1, kSchemaVersion - 1},
                     .published = published},
                    store_, log_);
  EXPECT_EQ(published->load(), kSchemaVersion - 1);
  ASSERT_TRUE(watch.Check("s1").ok());
  EXPECT_EQ(published->load(), kSchemaVersion);
  store_.schema = {kSchemaVersion + 1, kSchemaVersion + 1};
  EXPECT_TRUE(absl::IsFailedPrecondition(watch.Check("s1")));
  EXPECT_EQ(published->load(), kSchemaVersion);
}

}  // namespace
}  // namespace sqlgroup
