#include "member/rebalance_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sqlgroup {
namespace {

using store::Owner;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

Assignment Lexical(std::vector<std::string> sessions, int parts) {
  return LexicalRangeAssignor().Assign(std::move(sessions), parts);
}

// The plan as `me` sees `owners` (every owner named, as in session_parts).
RebalancePlan PlanRebalance(const std::string& me, const Assignment& assignment,
                            const std::vector<Owner>& owners,
                            const std::map<int, int64_t>& local) {
  store::Ownership ownership;
  for (const Owner& o : owners) {
    if (o.session == me) {
      ownership.mine[o.part] = o.epoch;
    } else {
      ownership.others.push_back(o.part);
    }
  }
  return sqlgroup::PlanRebalance(me, assignment, ownership, local);
}

TEST(RebalancePlan, AJoinerTakesOnlyFreePartsAndWaitsForTheRest) {
  // b joins a: a still owns everything.
  std::vector<Owner> owners;
  for (int p = 0; p < 4; ++p) owners.push_back({p, "a", 10 + p});
  const RebalancePlan b =
      PlanRebalance("b", Lexical({"a", "b"}, 4), owners, {});
  EXPECT_THAT(b.target, ElementsAre(2, 3));
  EXPECT_THAT(b.take, IsEmpty());
  EXPECT_FALSE(b.converged);
  const RebalancePlan a = PlanRebalance("a", Lexical({"a", "b"}, 4), owners,
                                        {{0, 10}, {1, 11}, {2, 12}, {3, 13}});
  EXPECT_THAT(a.drop, ElementsAre(2, 3));
  EXPECT_THAT(a.lost, IsEmpty());
  EXPECT_FALSE(a.converged);
}

TEST(RebalancePlan, FreePartsOfTheTargetAreTaken) {
  const RebalancePlan p =
      PlanRebalance("b", Lexical({"a", "b"}, 4), {{0, "a", 1}}, {});
  EXPECT_THAT(p.take, ElementsAre(2, 3));
}

TEST(RebalancePlan, PartsGoneOrReEpochedAreLost) {
  const RebalancePlan p =
      PlanRebalance("a", Lexical({"a"}, 3), {{0, "a", 5}, {1, "a", 9}},
                    {{0, 5}, {1, 6}, {2, 7}});
  EXPECT_THAT(p.lost, ElementsAre(1, 2));
  EXPECT_EQ(p.adopt.at(1), 9);
  EXPECT_THAT(p.take, ElementsAre(2));
}

TEST(RebalancePlan, StableOwnershipIsConvergedAndDoesNothing) {
  const RebalancePlan p = PlanRebalance("a", Lexical({"a", "b"}, 2),
                                        {{0, "a", 1}, {1, "b", 2}}, {{0, 1}});
  EXPECT_TRUE(p.converged);
  EXPECT_THAT(p.drop, IsEmpty());
  EXPECT_THAT(p.take, IsEmpty());
  EXPECT_THAT(p.lost, IsEmpty());
  EXPECT_TRUE(p.adopt.empty());
}

TEST(RebalancePlan, PartsBeyondThePartCountAreDropped) {
  const RebalancePlan p =
      PlanRebalance("a", Lexical({"a"}, 2), {{5, "a", 1}}, {{5, 1}});
  EXPECT_THAT(p.drop, ElementsAre(5));
}

// A view of live sessions `ids`, of which `statics` (id -> instance) are
// static members, and who owns which part.
store::GroupView View(std::vector<std::string> ids,
                      std::map<std::string, std::string> statics,
                      std::map<int, std::string> owners = {}) {
  store::GroupView v;
  v.live_sessions = std::move(ids);
  v.static_instances = std::move(statics);
  for (const auto& [part, owner] : owners) {
    v.ownership.others.push_back(part);
    v.ownership.owner_of[part] = owner;
  }
  return v;
}

TEST(AssignMembersTest, StaticMembersComeFirstInInstanceOrder) {
  // Session ids sort c < d < e; the instances put e before c.
  const Assignment a = AssignMembers(
      LexicalRangeAssignor(),
      View({"c", "d", "e"}, {{"c", "web-2"}, {"e", "web-1"}}), "d", 6);
  EXPECT_THAT(a.sessions, ElementsAre("c", "d", "e"));
  EXPECT_THAT(a.parts_of("e"), ElementsAre(0, 1));  // i/web-1
  EXPECT_THAT(a.parts_of("c"), ElementsAre(2, 3));  // i/web-2
  EXPECT_THAT(a.parts_of("d"), ElementsAre(4, 5));  // s/d
}

TEST(AssignMembersTest, ARestartedStaticMemberGetsItsPlaceBack) {
  // "old" held web-1's place; "new" is the same instance after a restart,
  // with a session id that sorts elsewhere.
  const auto before = AssignMembers(
      LexicalRangeAssignor(), View({"m", "old"}, {{"old", "web-1"}}), "m", 4);
  const auto after = AssignMembers(LexicalRangeAssignor(),
                                   View({"a", "m"}, {{"a", "web-1"}}), "m", 4);
  EXPECT_EQ(before.parts_of("old"), after.parts_of("a"));
  EXPECT_EQ(before.parts_of("m"), after.parts_of("m"));
}

TEST(RebalancePlan, PartsRunHereAreRevokedAndTheOthersDroppedAtOnce) {
  // a owns 0..3 in the database but runs only 0..2 (3 it never adopted,
  // 2 it is revoking already); b joined, so 2 and 3 move.
  std::vector<Owner> owners;
  for (int p = 0; p < 4; ++p) owners.push_back({p, "a", 10 + p});
  store::Ownership ownership;
  for (const Owner& o : owners) ownership.mine[o.part] = o.epoch;
  const RebalancePlan plan = sqlgroup::PlanRebalance(
      "a", Lexical({"a", "b"}, 4), ownership, {{0, 10}, {1, 11}, {2, 12}}, {2});
  EXPECT_THAT(plan.drop, ElementsAre(2, 3));
  EXPECT_THAT(plan.drop_now, ElementsAre(3));
  EXPECT_THAT(plan.revoke, IsEmpty());  // 2 is revoking already
  EXPECT_THAT(plan.unrevoke, IsEmpty());
}

TEST(RebalancePlan, ARevokingPartTargetedAgainIsUnrevoked) {
  store::Ownership ownership;
  for (int p = 0; p < 4; ++p) ownership.mine[p] = 10 + p;
  const RebalancePlan plan =
      sqlgroup::PlanRebalance("a", Lexical({"a"}, 4), ownership,
                              {{0, 10}, {1, 11}, {2, 12}, {3, 13}}, {2, 3});
  EXPECT_THAT(plan.unrevoke, ElementsAre(2, 3));
  EXPECT_THAT(plan.drop, IsEmpty());
  EXPECT_TRUE(plan.converged);
}

TEST(RebalancePlan, ALostPartNeedsNoDrain) {
  // Part 1 was taken anew under another epoch and moves away: it no
  // longer runs here, so it is dropped at once and not revoked.
  store::Ownership ownership;
  ownership.mine = {{0, 10}, {1, 99}};
  const RebalancePlan plan = sqlgroup::PlanRebalance(
      "a", Lexical({"a", "b"}, 2), ownership, {{0, 10}, {1, 11}}, {1});
  EXPECT_THAT(plan.lost, ElementsAre(1));
  EXPECT_THAT(plan.drop_now, ElementsAre(1));
  EXPECT_THAT(plan.revoke, IsEmpty());
  EXPECT_THAT(plan.unrevoke, IsEmpty());
}

TEST(AssignMembersTest, TheStickyAssignorSeesWhoOwnsWhat) {
  // "x" owns parts 2 and 3 and keeps them; an owner that is not live counts
  // as none, so part 5 is free. The free parts go in ascending order to the
  // members short of 3: one to "x", the rest to "y".
  const Assignment a = AssignMembers(
      StickyAssignor(), View({"x", "y"}, {}, {{2, "x"}, {3, "x"}, {5, "gone"}}),
      "y", 6);
  EXPECT_THAT(a.parts_of("x"), ElementsAre(0, 2, 3));
  EXPECT_THAT(a.parts_of("y"), ElementsAre(1, 4, 5));
}

}  // namespace
}  // namespace sqlgroup
