// ConnectionsReport over the fake membership store: a member's connections
// are recorded for describe when they change, not on every turn.
#include "member/connections_report.h"

#include <gtest/gtest.h>

#include "spdlog/sinks/null_sink.h"
#include "spdlog/spdlog.h"
#include "support/fake_membership_store.h"

namespace sqlgroup {
namespace {

class ConnectionsReportTest : public ::testing::Test {
 protected:
  testing::FakeMembershipStore store_{4};
  std::shared_ptr<spdlog::logger> log_ = std::make_shared<spdlog::logger>(
      "t", std::make_shared<spdlog::sinks::null_sink_mt>());
};

TEST_F(ConnectionsReportTest, RecordsOnlyAChange) {
  ConnectionsReport report("g", store_, log_, absl::ZeroDuration());
  ASSERT_TRUE(report.Report("s1", 2, 8).ok());
  ASSERT_TRUE(report.Report("s1", 2, 8).ok());
  ASSERT_TRUE(report.Report("s1", 3, 8).ok());
  ASSERT_TRUE(report.Report("s2", 3, 8).ok());  // a new session
  ASSERT_EQ(store_.reports.size(), 3u);
  EXPECT_EQ(store_.reports[1].held, 3);
  EXPECT_EQ(store_.reports[2].session, "s2");
}

TEST_F(ConnectionsReportTest, ChangesWithinTheIntervalWaitForIt) {
  ConnectionsReport report("g", store_, log_, absl::Hours(1));
  ASSERT_TRUE(report.Report("s1", 1, 8).ok());
  ASSERT_TRUE(report.Report("s1", 2, 8).ok());
  EXPECT_EQ(store_.reports.size(), 1u);
}

TEST_F(ConnectionsReportTest, ASchemaWithoutTheColumnsStopsTheReportsQuietly) {
  ConnectionsReport report("g", store_, log_, absl::ZeroDuration());
  store_.fail_report = absl::FailedPreconditionError("no such column");
  EXPECT_TRUE(report.Report("s1", 1, 8).ok());
  store_.fail_report = absl::OkStatus();
  EXPECT_TRUE(report.Report("s1", 2, 8).ok());
  EXPECT_TRUE(store_.reports.empty());
}

TEST_F(ConnectionsReportTest, ABrokenConnectionIsTheCallersAndIsTriedAgain) {
  ConnectionsReport report("g", store_, log_, absl::ZeroDuration());
  store_.fail_report = absl::UnavailableError("connection lost");
  EXPECT_TRUE(absl::IsUnavailable(report.Report("s1", 1, 8)));
  store_.fail_report = absl::OkStatus();
  EXPECT_TRUE(report.Report("s1", 1, 8).ok());
  EXPECT_EQ(store_.reports.size(), 1u);
}

}  // namespace
}  // namespace sqlgroup
