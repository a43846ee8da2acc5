// A group that names the sticky assignor, against a real PostgreSQL:
// members read the choice from the group, a join moves only the
// newcomer's share, a leave only the leaver's parts, and a member refuses
// a group whose assignor it does not know.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

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
#include "support/wait.h"

namespace sqlgroup {
namespace {

using ::testing::HasSubstr;
using testing::WaitFor;

constexpr int kParts = 32;

class StickyFleetTest : public testing::ConsumerFixture {
 protected:
  void CreateSticky(const std::string& group) {
    auto admin = Admin::Connect({.dsn = db_.dsn()});
    ASSERT_TRUE(admin.ok()) << admin.status();
    GroupConfig config;
    config.name = group;
    config.parts = kParts;
    config.assignor = "sticky";
    ASSERT_TRUE((*admin)->CreateGroup(config).ok());
  }

  // Every part owned by one of `members`, sizes within one.
  bool Balanced(const std::vector<Consumer*>& members) {
    std::map<std::string, int> sizes;
    for (Consumer* c : members) {
      if (c->session_id().empty()) return false;
      sizes[c->session_id()] = 0;
    }
    const auto owners = Owners("g");
    if (static_cast<int>(owners.size()) != kParts) return false;
    for (const auto& [part, owner] : owners) {
      auto it = sizes.find(owner.first);
      if (it == sizes.end()) return false;
      ++it->second;
    }
    int lo = kParts, hi = 0;
    for (const auto& [s, n] : sizes) {
      lo = std::min(lo, n);
      hi = std::max(hi, n);
    }
    return hi - lo <= 1;
  }

  int64_t Takes() {
    return Count("SELECT count(*) FROM sqlgroup.ownership_log");
  }
};

TEST_F(StickyFleetTest, AJoinMovesOnlyTheNewcomersShareAndALeaveOnlyItsParts) {
  CreateSticky("g");
  auto noop = [](const Item&, AckTransaction&) { return absl::OkStatus(); };
  std::vector<std::unique_ptr<Consumer>> members;
  std::vector<Consumer*> live;
  for (int i = 0; i < 4; ++i) {
    members.push_back(Start(Options("g", noop)));
    live.push_back(members.back().get());
  }
  ASSERT_TRUE(WaitFor([&] { return Balanced(live); }, absl::Seconds(20)));
  absl::SleepFor(absl::Seconds(1));  // nothing moves once settled
  ASSERT_TRUE(Balanced(live));
  const auto before = Owners("g");
  const int64_t takes = Takes();

  prometheus::Registry registry;
  ConsumerOptions fifth = Options("g", noop);
  fifth.metrics = &registry;
  members.push_back(Start(std::move(fifth)));
  live.push_back(members.back().get());
  ASSERT_TRUE(WaitFor([&] { return Balanced(live); }, absl::Seconds(20)));
  absl::SleepFor(absl::Seconds(1));
  const auto joined = Owners("g");
  EXPECT_EQ(testing::MetricSum(registry, "sqlgroup_parts_taken_total",
                               {{"reason", "join"}}),
            kParts / 5);
  int moved = 0;
  for (const auto& [part, owner] : joined) {
    if (owner.first != before.at(part).first) {
      ++moved;
      EXPECT_EQ(owner.first, live.back()->session_id()) << "part " << part;
    }
  }
  EXPECT_EQ(moved, kParts / 5);  // floor(32/5): the newcomer holds nothing
  EXPECT_EQ(Takes() - takes, moved);

  // A graceful leave: its parts go to the others, nothing else moves.
  const std::string leaver = live[1]->session_id();
  const int64_t takes_before_leave = Takes();
  EXPECT_TRUE(members[1]->Stop().ok());
  live.erase(live.begin() + 1);
  ASSERT_TRUE(WaitFor([&] { return Balanced(live); }, absl::Seconds(20)));
  absl::SleepFor(absl::Seconds(1));
  int leaver_parts = 0;
  for (const auto& [part, owner] : joined) {
    const std::string now = Owners("g").at(part).first;
    if (owner.first == leaver) {
      ++leaver_parts;
    } else {
      EXPECT_EQ(now, owner.first) << "part " << part;
    }
  }
  EXPECT_EQ(Takes() - takes_before_leave, leaver_parts);
  for (auto& m : members) {
    if (m) {
      EXPECT_TRUE(m->Stop().ok());
    }
  }
}

TEST_F(StickyFleetTest, AMemberRefusesAnAssignorItDoesNotKnow) {
  CreateSticky("g");
  // As a newer sqlgroup might store it: the check allows only known names,
  // so lift it as such a migration would.
  pqxx::nontransaction(*conn_).exec(
      "ALTER TABLE sqlgroup.groups DROP CONSTRAINT groups_assignor_valid");
  pqxx::nontransaction(*conn_).exec(
      "UPDATE sqlgroup.groups SET assignor = 'uniform' WHERE name = 'g'");
  auto c = Start(Options(
      "g", [](const Item&, AckTransaction&) { return absl::OkStatus(); }));
  ASSERT_TRUE(WaitFor([&] { return c->state() == Consumer::State::kFailed; },
                      absl::Seconds(10)));
  const absl::Status s = c->Stop();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("uses the assignor 'uniform'"));
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.session_parts"), 0);
}

TEST_F(StickyFleetTest, AnUnknownAssignorIsRefusedAndNoGroupIsCreated) {
  auto admin = Admin::Connect({.dsn = db_.dsn()});
  ASSERT_TRUE(admin.ok()) << admin.status();
  GroupConfig config;
  config.name = "g";
  config.assignor = "range";
  const absl::Status s = (*admin)->CreateGroup(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'range' is not an assignor"));
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.groups"), 0);
}

}  // namespace
}  // namespace sqlgroup
