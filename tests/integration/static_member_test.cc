// Static members against a real PostgreSQL: a restart with the same
// instance name moves no part of the others, a graceful stop keeps the
// member's parts for its static timeout and then lets them go, a second
// process with the name takes the place and the first one stops, and a
// leave for good hands the parts over at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/consumer.h"
#include "support/consumer_fixture.h"
#include "support/metric_reader.h"
#include "support/subprocess.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using ::testing::HasSubstr;
using testing::WaitFor;

constexpr int kParts = 12;

class StaticMemberTest : public testing::ConsumerFixture {
 protected:
  ConsumerOptions Static(const std::string& instance,
                         absl::Duration timeout = absl::Seconds(30)) {
    ConsumerOptions o = Options(
        "g", [](const Item&, AckTransaction&) { return absl::OkStatus(); });
    o.instance = instance;
    o.static_timeout = timeout;
    return o;
  }

  // part -> the instance of its owner's session.
  std::map<int, std::string> OwnerInstances() {
    pqxx::nontransaction tx(*conn_);
    std::map<int, std::string> owners;
    for (const auto& row :
         tx.exec("SELECT p.part, s.instance FROM sqlgroup.session_parts p "
                 "JOIN sqlgroup.sessions s ON s.id = p.session_id")) {
      owners[row[0].as<int>()] = row[1].as<std::string>();
    }
    return owners;
  }

  // Every part owned, in contiguous blocks of 4 by m0, m1, m2 (the lexical
  // order of the instance names).
  bool OwnedByName() {
    const auto owners = OwnerInstances();
    if (static_cast<int>(owners.size()) != kParts) return false;
    for (const auto& [part, instance] : owners) {
      if (instance != absl::StrCat("m", part / 4)) return false;
    }
    return true;
  }
};

TEST_F(StaticMemberTest, ARestartWithTheSameNameMovesNothingElse) {
  CreateGroup("g", kParts);
  prometheus::Registry registry0, registry1b;
  ConsumerOptions o0 = Static("m0");
  o0.metrics = &registry0;
  auto m0 = Start(o0);
  auto m1 = Start(Static("m1"));
  auto m2 = Start(Static("m2"));
  ASSERT_TRUE(WaitFor([&] { return OwnedByName(); }, absl::Seconds(20)));
  const int64_t log = Count("SELECT count(*) FROM sqlgroup.ownership_log");
  const std::string settled = pqxx::nontransaction(*conn_)
                                  .exec1("SELECT clock_timestamp()::text")[0]
                                  .as<std::string>();

  // m1 stops gracefully: its parts stay with its session, unconsumed.
  EXPECT_TRUE(m1->Stop().ok());
  absl::SleepFor(absl::Seconds(2));
  EXPECT_TRUE(OwnedByName());
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.ownership_log"), log);
  // Shown away, with the time its parts still wait, by describe and by
  // the others' metrics.
  auto d = admin_->DescribeGroup("g", /*count_lag=*/false);
  ASSERT_TRUE(d.ok()) << d.status();
  for (const MemberInfo& m : d->members) {
    EXPECT_EQ(m.static_timeout, absl::Seconds(30)) << m.instance;
    EXPECT_FALSE(m.expired) << m.instance;
    if (m.instance == "m1") {
      ASSERT_TRUE(m.away_left.has_value());
      EXPECT_GT(*m.away_left, absl::Seconds(25));
      EXPECT_LE(*m.away_left, absl::Seconds(30));
    } else {
      EXPECT_FALSE(m.away_left.has_value()) << m.instance;
    }
  }
  EXPECT_TRUE(WaitFor(
      [&] {
        return testing::MetricSum(registry0, "sqlgroup_static_members_away") ==
               1;
      },
      absl::Seconds(5)));
  const double until =
      testing::MetricSum(registry0, "sqlgroup_static_member_away_until_seconds",
                         {{"static_member", "m1"}});
  EXPECT_GT(until, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) + 25);

  // Back under the same name: it takes its own parts, nobody else moves.
  const absl::Time back = absl::Now();
  ConsumerOptions o1b = Static("m1");
  o1b.metrics = &registry1b;
  auto m1b = Start(o1b);
  ASSERT_TRUE(WaitFor(
      [&] {
        return !m1b->session_id().empty() && OwnedByName() &&
               Count(absl::StrCat("SELECT count(*) FROM sqlgroup.session_parts "
                                  "WHERE session_id = '",
                                  m1b->session_id(), "'")) == 4;
      },
      absl::Seconds(10)));
  EXPECT_LT(absl::Now() - back, absl::Seconds(3));
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.ownership_log") - log, 4);
  EXPECT_EQ(
      Count(absl::StrCat("SELECT count(*) FROM sqlgroup.ownership_log WHERE "
                         "session_id IN ('",
                         m0->session_id(), "', '", m2->session_id(),
                         "') AND released_at > '", settled, "'")),
      0);
  EXPECT_EQ(testing::MetricSum(registry1b, "sqlgroup_parts_taken_total",
                               {{"reason", "return"}}),
            4);
  EXPECT_TRUE(WaitFor(
      [&] {
        return testing::MetricSum(registry0, "sqlgroup_static_members_away") ==
               0;
      },
      absl::Seconds(5)));
  for (auto* c : {m0.get(), m1b.get(), m2.get()}) EXPECT_TRUE(c->Leave().ok());
}

// The crash of a static member restarted at once (as systemd or Kubernetes
// would): the new process takes the killed one's place and parts from its
// session at once, long before the TTL reaps it, and nobody else moves.
TEST_F(StaticMemberTest, AKilledMemberRestartedAtOnceIsBackBeforeTheTtl) {
  CreateGroup("g", kParts, /*ttl=*/absl::Seconds(20));
  const std::filesystem::path logs =
      std::filesystem::temp_directory_path() / "static_member_test";
  std::filesystem::create_directories(logs);
  auto process = [&](const std::string& log) {
    return std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{testing::CliPath(), "consume", "--dsn",
                                 member_dsn_, "--group", "g", "--handler",
                                 "noop", "--instance", "m1", "--static_timeout",
                                 "30s", "--metrics_addr", ""},
        (logs / log).string());
  };
  auto m0 = Start(Static("m0"));
  auto m1 = process("m1.log");
  auto m2 = Start(Static("m2"));
  ASSERT_TRUE(WaitFor([&] { return OwnedByName(); }, absl::Seconds(20)))
      << m1->Log();
  const std::string settled = pqxx::nontransaction(*conn_)
                                  .exec1("SELECT clock_timestamp()::text")[0]
                                  .as<std::string>();
  const std::string killed_session =
      pqxx::nontransaction(*conn_)
          .exec1(
              "SELECT id::text FROM sqlgroup.sessions "
              "WHERE instance = 'm1'")[0]
          .as<std::string>();

  const absl::Time t0 = absl::Now();
  m1->Signal(SIGKILL);
  m1->Wait(absl::Seconds(5));
  auto m1b = process("m1b.log");
  ASSERT_TRUE(WaitFor(
      [&] {
        return OwnedByName() &&
               Count(absl::StrCat("SELECT count(*) FROM sqlgroup.session_parts "
                                  "p JOIN sqlgroup.sessions s ON s.id = "
                                  "p.session_id WHERE s.instance = 'm1' AND "
                                  "s.id <> '",
                                  killed_session, "'")) == kParts / 3;
      },
      absl::Seconds(10)))
      << m1b->Log();
  // Well within the 20 s TTL (about 0.4 s measured): the new process took
  // the place, nobody waited for the killed session to expire.
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  EXPECT_EQ(
      Count(absl::StrCat("SELECT count(*) FROM sqlgroup.ownership_log "
                         "WHERE session_id = '",
                         killed_session, "' AND released_by = 'replaced'")),
      kParts / 3);
  EXPECT_EQ(
      Count(absl::StrCat("SELECT count(*) FROM sqlgroup.ownership_log WHERE "
                         "session_id IN ('",
                         m0->session_id(), "', '", m2->session_id(),
                         "') AND (released_at > '", settled,
                         "' OR acquired_at > '", settled, "')")),
      0);
  m1b->Signal(SIGTERM);
  EXPECT_EQ(m1b->Wait(absl::Seconds(20)), 0) << m1b->Log();
  for (auto* c : {m0.get(), m2.get()}) EXPECT_TRUE(c->Leave().ok());
}

TEST_F(StaticMemberTest, AnAwayMembersPartsMoveAfterItsStaticTimeout) {
  CreateGroup("g", kParts);
  auto m0 = Start(Static("m0", absl::Seconds(2)));
  auto m1 = Start(Static("m1", absl::Seconds(2)));
  ASSERT_TRUE(WaitFor(
      [&] {
        return static_cast<int>(OwnerInstances().size()) == kParts &&
               m0->owned_parts().size() == kParts / 2;
      },
      absl::Seconds(20)));
  EXPECT_TRUE(m1->Stop().ok());
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(m0->owned_parts().size(), static_cast<size_t>(kParts / 2));
  // After 2 s away, and the TTL for a reap: m0 owns everything.
  ASSERT_TRUE(WaitFor([&] { return m0->owned_parts().size() == kParts; },
                      absl::Seconds(15)));
  EXPECT_TRUE(m0->Leave().ok());
}

TEST_F(StaticMemberTest, TheNewestProcessWithANameWinsAndTheOldOneStops) {
  CreateGroup("g", kParts);
  auto first = Start(Static("m0"));
  ASSERT_TRUE(WaitFor([&] { return first->owned_parts().size() == kParts; },
                      absl::Seconds(20)));
  auto second = Start(Static("m0"));
  ASSERT_TRUE(WaitFor([&] { return second->owned_parts().size() == kParts; },
                      absl::Seconds(10)));
  ASSERT_TRUE(
      WaitFor([&] { return first->state() == Consumer::State::kFailed; },
              absl::Seconds(15)));
  const absl::Status s = first->Stop();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("instance 'm0' of group g was taken "
                                     "over by another process"));
  // The loser did not take the place back.
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(second->owned_parts().size(), static_cast<size_t>(kParts));
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.sessions"), 1);
  EXPECT_TRUE(second->Leave().ok());
}

TEST_F(StaticMemberTest, LeavingForGoodHandsThePartsOverAtOnce) {
  CreateGroup("g", kParts);
  auto m0 = Start(Static("m0"));
  auto m1 = Start(Static("m1"));
  ASSERT_TRUE(WaitFor(
      [&] {
        return m0->owned_parts().size() == kParts / 2 &&
               m1->owned_parts().size() == kParts / 2;
      },
      absl::Seconds(20)));
  const absl::Time left = absl::Now();
  EXPECT_TRUE(m1->Leave().ok());
  ASSERT_TRUE(WaitFor([&] { return m0->owned_parts().size() == kParts; },
                      absl::Seconds(5)));
  EXPECT_LT(absl::Now() - left, absl::Seconds(3));
  EXPECT_TRUE(m0->Leave().ok());
}

TEST_F(StaticMemberTest, BadStaticSettingsAreRefused) {
  CreateGroup("g", kParts);
  ConsumerOptions no_name = Static("");
  EXPECT_THAT(Consumer::Create(no_name).status().message(),
              HasSubstr("static_timeout needs an instance name"));
  ConsumerOptions too_short = Static("m0", absl::Milliseconds(10));
  const auto c = Consumer::Create(too_short);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("below group g's heartbeat"));
}

}  // namespace
}  // namespace sqlgroup
