// Static members against a real PostgreSQL: a restart with the same
// instance name moves no part of the others, a graceful stop keeps the
// member's parts for its static timeout and then lets them go, a second
// process with the name takes the place and the first one stops, and a
// leave for good hands the parts over at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/consumer.h"
#include "support/consumer_fixture.h"
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
  auto m0 = Start(Static("m0"));
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

  // Back under the same name: it takes its own parts, nobody else moves.
  const absl::Time back = absl::Now();
  auto m1b = Start(Static("m1"));
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
  for (auto* c : {m0.get(), m1b.get(), m2.get()}) EXPECT_TRUE(c->Leave().ok());
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
