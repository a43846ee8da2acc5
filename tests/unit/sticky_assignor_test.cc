// The sticky assignor: scenario tables, then a randomized checker over
// thousands of membership histories (librdkafka's assignor tests are the
// model): every result valid and balanced, idempotent, the same for any
// input order, stable while its own moves are half done, and moving no
// more than a join or a leave requires.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sqlgroup/assignor.h"

namespace sqlgroup {
namespace {

using ::testing::ElementsAre;

// The owner's name of every part (empty: none).
std::vector<std::string> Owners(const Assignment& a) {
  std::vector<std::string> owners;
  for (int o : a.owner) owners.push_back(o < 0 ? "" : a.sessions[o]);
  return owners;
}

int Moved(const std::vector<std::string>& before,
          const std::vector<std::string>& after) {
  int moved = 0;
  for (size_t p = 0; p < after.size(); ++p) {
    moved += !before[p].empty() && before[p] != after[p];
  }
  return moved;
}

// Every part owned by one of the sessions, sizes within one of each other.
void ExpectValid(const Assignment& a, int parts) {
  ASSERT_EQ(static_cast<int>(a.owner.size()), parts);
  const int n = static_cast<int>(a.sessions.size());
  std::vector<int> sizes(n, 0);
  for (int o : a.owner) {
    ASSERT_GE(o, 0);
    ASSERT_LT(o, n);
    ++sizes[o];
  }
  const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
  EXPECT_LE(*hi - *lo, 1);
}

std::vector<std::string> Names(int n, int from = 0) {
  std::vector<std::string> names;
  for (int i = from; i < from + n; ++i) names.push_back(absl::StrCat("m", i));
  return names;
}

TEST(StickyAssignorTest, WithNoOwnersItCutsContiguousBlocksInLexicalOrder) {
  StickyAssignor sticky;
  const Assignment a = sticky.Assign({"c", "a", "b"}, 8);
  EXPECT_THAT(a.sessions, ElementsAre("a", "b", "c"));
  EXPECT_THAT(a.owner, ElementsAre(0, 0, 0, 1, 1, 1, 2, 2));
}

TEST(StickyAssignorTest, AFifthMemberTakesOnlyItsShare) {
  StickyAssignor sticky;
  LexicalRangeAssignor lexical;
  const std::vector<std::string> four = Owners(lexical.Assign(Names(4), 32));
  const Assignment five = sticky.Assign(Names(5), 32, four);
  ExpectValid(five, 32);
  EXPECT_EQ(Moved(four, Owners(five)), 6);  // floor(32/5): m4 is not over
  EXPECT_EQ(five.parts_of("m4").size(), 6u);
  // The others keep their lowest parts.
  EXPECT_THAT(five.parts_of("m0"), ElementsAre(0, 1, 2, 3, 4, 5, 6));
}

TEST(StickyAssignorTest, ALeaverHandsOverItsPartsAndNothingElseMoves) {
  StickyAssignor sticky;
  LexicalRangeAssignor lexical;
  const std::vector<std::string> four = Owners(lexical.Assign(Names(4), 32));
  const Assignment three = sticky.Assign({"m0", "m1", "m3"}, 32, four);
  ExpectValid(three, 32);
  EXPECT_EQ(Moved(four, Owners(three)), 8);  // m2's parts, 16..23
  for (int p = 0; p < 32; ++p) {
    if (four[p] != "m2") {
      EXPECT_EQ(Owners(three)[p], four[p]) << p;
    }
  }
}

TEST(StickyAssignorTest, OwnersThatAreNotMembersCountAsNone) {
  StickyAssignor sticky;
  const Assignment a = sticky.Assign({"a", "b"}, 4, {"gone", "b", "gone", "a"});
  ExpectValid(a, 4);
  EXPECT_THAT(Owners(a), ElementsAre("a", "b", "b", "a"));
}

TEST(StickyAssignorTest, FewerPartsThanMembersGoToTheirHolders) {
  StickyAssignor sticky;
  const Assignment a = sticky.Assign({"a", "b", "c", "d"}, 2, {"d", "b"});
  EXPECT_THAT(Owners(a), ElementsAre("d", "b"));
}

TEST(StickyAssignorTest, TheGroupNamesItsAssignor) {
  EXPECT_NE(AssignorNamed("lexical"), nullptr);
  EXPECT_NE(AssignorNamed("sticky"), nullptr);
  EXPECT_EQ(AssignorNamed("range"), nullptr);
  EXPECT_EQ(AssignorNamed(""), nullptr);
}

// A state between `from` and `to`, as members see it while they move
// parts: each moving part still with its old owner, dropped, or taken.
std::vector<std::string> HalfWay(const std::vector<std::string>& from,
                                 const std::vector<std::string>& to,
                                 std::mt19937& rng) {
  std::vector<std::string> mid = to;
  for (size_t p = 0; p < to.size(); ++p) {
    if (from[p] == to[p]) continue;
    switch (rng() % 3) {
      case 0:
        mid[p] = from[p];
        break;
      case 1:
        mid[p] = "";
        break;
      default:
        break;
    }
  }
  return mid;
}

TEST(StickyAssignorTest, RandomMembershipHistoriesStayValidStableAndMinimal) {
  StickyAssignor sticky;
  std::mt19937 rng(20261124);
  int checked = 0;
  for (int history = 0; history < 2000; ++history) {
    const int parts = history % 10 == 0 ? 1 + static_cast<int>(rng() % 4096)
                                        : 1 + static_cast<int>(rng() % 64);
    std::vector<std::string> members = Names(1 + rng() % 6);
    int next_name = 100;
    std::vector<std::string> owners(parts);  // nobody yet
    for (int step = 0; step < 12; ++step) {
      const int n = static_cast<int>(members.size());
      // A join, a leave, or several changes at once.
      const int kind = n == 1 ? 0 : static_cast<int>(rng() % 3);
      std::string leaver;
      if (kind == 0) {
        members.push_back(absl::StrCat("m", next_name++));
      } else if (kind == 1) {
        const int i = static_cast<int>(rng() % n);
        leaver = members[i];
        members.erase(members.begin() + i);
      } else {
        std::shuffle(members.begin(), members.end(), rng);
        members.resize(1 + rng() % n);
        for (int j = rng() % 3; j > 0; --j) {
          members.push_back(absl::StrCat("m", next_name++));
        }
      }
      const Assignment a = sticky.Assign(members, parts, owners);
      ExpectValid(a, parts);
      const std::vector<std::string> target = Owners(a);
      // Idempotent, and the same for any order of the members.
      EXPECT_EQ(Owners(sticky.Assign(members, parts, target)), target);
      std::vector<std::string> shuffled = members;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      EXPECT_EQ(Owners(sticky.Assign(shuffled, parts, owners)), target);
      // Members that read the group while parts move aim at the same
      // target.
      EXPECT_EQ(
          Owners(sticky.Assign(members, parts, HalfWay(owners, target, rng))),
          target);
      // Movement, from a balanced start with every part owned.
      const bool settled =
          step > 0 &&
          std::none_of(owners.begin(), owners.end(),
                       [](const std::string& o) { return o.empty(); });
      if (settled && kind == 0) {
        // Only the newcomer gains, and no more than its share.
        const int now = static_cast<int>(members.size());
        EXPECT_LE(Moved(owners, target), (parts + now - 1) / now);
        for (int p = 0; p < parts; ++p) {
          if (target[p] != owners[p]) {
            EXPECT_EQ(target[p], members.back());
          }
        }
      }
      if (settled && kind == 1) {
        for (int p = 0; p < parts; ++p) {
          if (owners[p] != leaver) {
            EXPECT_EQ(target[p], owners[p])
                << "part " << p << " of " << parts << ", leaver " << leaver
                << ", before " << absl::StrJoin(owners, ",") << ", after "
                << absl::StrJoin(target, ",");
          }
        }
      }
      owners = target;
      ++checked;
      if (testing::Test::HasFailure()) return;
    }
  }
  EXPECT_EQ(checked, 24000);
}

TEST(StickyAssignorTest, FromAnyStartNoSessionWithinItsShareLosesAPart) {
  // From arbitrary owners (a switch from another assignor, members that
  // left): when at most P mod N sessions hold more than floor(P/N), every
  // session holding at most floor(P/N) + 1 keeps all its parts.
  StickyAssignor sticky;
  std::mt19937 rng(7);
  int cases = 0;
  for (int round = 0; round < 5000; ++round) {
    const int parts = 1 + static_cast<int>(rng() % 40);
    const std::vector<std::string> members = Names(1 + rng() % 7);
    const int n = static_cast<int>(members.size());
    std::vector<std::string> owners(parts);
    for (std::string& o : owners) {
      const int pick = static_cast<int>(rng() % (n + 2));
      o = pick < n ? members[pick] : pick == n ? "" : "gone";
    }
    std::map<std::string, int> held;
    for (const std::string& o : owners) ++held[o];
    const int base = parts / n;
    int over = 0;
    for (const std::string& m : members) over += held[m] > base;
    if (over > parts % n) continue;
    ++cases;
    const Assignment a = sticky.Assign(members, parts, owners);
    ExpectValid(a, parts);
    const std::vector<std::string> target = Owners(a);
    for (int p = 0; p < parts; ++p) {
      const std::string& o = owners[p];
      if (held.count(o) && o != "" && o != "gone" && held[o] <= base + 1) {
        EXPECT_EQ(target[p], o) << "part " << p;
      }
    }
    if (testing::Test::HasFailure()) return;
  }
  EXPECT_GT(cases, 1000);
}

}  // namespace
}  // namespace sqlgroup
