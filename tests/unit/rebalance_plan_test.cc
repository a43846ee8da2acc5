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

}  // namespace
}  // namespace sqlgroup
