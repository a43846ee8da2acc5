#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "sqlgroup/assignor.h"

namespace sqlgroup {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The invariants every lexical assignment must satisfy, checked after every
// case: each part owned exactly once (when there is a session), block sizes
// differ by at most one, blocks are contiguous and follow session order.
void ExpectValidLexicalAssignment(const Assignment& a, int parts) {
  ASSERT_EQ(static_cast<int>(a.owner.size()), parts);
  ASSERT_TRUE(std::is_sorted(a.sessions.begin(), a.sessions.end()));
  const int n = static_cast<int>(a.sessions.size());
  if (n == 0) {
    for (int o : a.owner) EXPECT_EQ(o, -1);
    return;
  }
  std::vector<int> sizes(n, 0);
  int previous = 0;
  for (int p = 0; p < parts; ++p) {
    const int o = a.owner[p];
    ASSERT_GE(o, 0) << "part " << p << " has no owner";
    ASSERT_LT(o, n);
    ASSERT_GE(o, previous) << "blocks out of session order at part " << p;
    previous = o;
    ++sizes[o];
  }
  const auto [min, max] = std::minmax_element(sizes.begin(), sizes.end());
  EXPECT_LE(*max - *min, 1);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(sizes[i], (i + 1) * parts / n - i * parts / n) << "session " << i;
  }
}

Assignment AssignChecked(std::vector<std::string> sessions, int parts) {
  Assignment a = LexicalRangeAssignor().Assign(std::move(sessions), parts);
  ExpectValidLexicalAssignment(a, parts);
  return a;
}

TEST(LexicalAssignor, EightPartsThreeSessionsMatchesTheSeedExample) {
  const Assignment a = AssignChecked({"c", "a", "b"}, 8);
  EXPECT_THAT(a.parts_of("a"), ElementsAre(0, 1));
  EXPECT_THAT(a.parts_of("b"), ElementsAre(2, 3, 4));
  EXPECT_THAT(a.parts_of("c"), ElementsAre(5, 6, 7));
}

TEST(LexicalAssignor, EightPartsTwoSessionsSplitInHalves) {
  const Assignment a = AssignChecked({"c11f8e9b-1d67-493a-98d1-a7a3f645ab2a",
                                      "b4b3722f-ac65-4495-afca-5883da1ff861"},
                                     8);
  EXPECT_THAT(a.parts_of("b4b3722f-ac65-4495-afca-5883da1ff861"),
              ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(a.parts_of("c11f8e9b-1d67-493a-98d1-a7a3f645ab2a"),
              ElementsAre(4, 5, 6, 7));
}

TEST(LexicalAssignor, FewerPartsThanSessionsLeavesSomeSessionsWithNothing) {
  const Assignment a = AssignChecked({"a", "b", "c", "d", "e"}, 2);
  // Session i gets [floor(2i/5), floor(2(i+1)/5)): c and e.
  EXPECT_THAT(a.parts_of("a"), IsEmpty());
  EXPECT_THAT(a.parts_of("b"), IsEmpty());
  EXPECT_THAT(a.parts_of("c"), ElementsAre(0));
  EXPECT_THAT(a.parts_of("d"), IsEmpty());
  EXPECT_THAT(a.parts_of("e"), ElementsAre(1));
}

TEST(LexicalAssignor, OneSessionOwnsEveryPart) {
  const Assignment a = AssignChecked({"only"}, 16);
  EXPECT_EQ(a.parts_of("only").size(), 16u);
}

TEST(LexicalAssignor, NoSessionsLeavesEveryPartUnowned) {
  const Assignment a = AssignChecked({}, 4);
  EXPECT_THAT(a.owner, ElementsAre(-1, -1, -1, -1));
}

TEST(LexicalAssignor, DuplicateSessionIdsCountOnce) {
  const Assignment a = AssignChecked({"b", "a", "b"}, 4);
  EXPECT_THAT(a.sessions, ElementsAre("a", "b"));
}

TEST(LexicalAssignor, UnknownSessionGetsNothing) {
  EXPECT_THAT(AssignChecked({"a"}, 4).parts_of("z"), IsEmpty());
}

TEST(LexicalAssignor, MaximumPartCountSplitsEvenly) {
  std::vector<std::string> sessions;
  for (int i = 0; i < 7; ++i) sessions.push_back(absl::StrFormat("s%02d", i));
  const Assignment a = AssignChecked(sessions, 4096);
  EXPECT_EQ(a.parts_of("s00").size(), 585u);  // floor(4096/7)
  EXPECT_EQ(a.parts_of("s06").size(), 586u);
}

TEST(LexicalAssignor, SeededRandomSweepKeepsEveryInvariant) {
  std::mt19937 rng(20261122);
  for (int round = 0; round < 2000; ++round) {
    const int parts = 1 + static_cast<int>(rng() % 4096);
    const int n = static_cast<int>(rng() % 40);
    std::vector<std::string> sessions;
    for (int i = 0; i < n; ++i) {
      sessions.push_back(absl::StrFormat("%08x", static_cast<unsigned>(rng())));
    }
    SCOPED_TRACE(
        absl::StrFormat("round %d: %d parts, %d sessions", round, parts, n));
    AssignChecked(sessions, parts);
    if (HasFatalFailure() || HasNonfatalFailure()) return;
  }
}

}  // namespace
}  // namespace sqlgroup
