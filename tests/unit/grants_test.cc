// The grants' SQL as `sqlgroup grant` builds it: group patterns checked,
// the role and the groups put in as quoted SQL, never as raw text.
#include "grants.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sqlgroup::internal {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(CheckGroupPatternTest, NamesAndPatternsPass) {
  for (const std::string& p :
       std::vector<std::string>{"orders", "orders-*", "*", "a.b_c-1", "*-eu",
                                std::string(128, 'x')}) {
    EXPECT_TRUE(CheckGroupPattern(p).ok()) << p;
  }
}

TEST(CheckGroupPatternTest, OthersAreRefusedWithASentence) {
  for (const std::string& p :
       std::vector<std::string>{"", "-orders", "_x", "or'ders", "a,b", "a%",
                                "a b", "{a}", std::string(129, 'x')}) {
    const absl::Status s = CheckGroupPattern(p);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << p;
    EXPECT_THAT(std::string(s.message()), HasSubstr("--group")) << p;
  }
}

TEST(GrantSqlTest, EveryGroupWithoutPatterns) {
  auto sql = GrantSql("member", "worker", {});
  ASSERT_TRUE(sql.ok()) << sql.status();
  EXPECT_THAT(*sql, HasSubstr("sqlgroup.grant_groups('member', 'worker', "
                              "'{\"*\"}')"));
  EXPECT_THAT(*sql, HasSubstr("TO \"worker\""));
  EXPECT_THAT(*sql, Not(HasSubstr(":'")));
  EXPECT_THAT(*sql, Not(HasSubstr(":\"")));
}

TEST(GrantSqlTest, PatternsAndQuotedRoles) {
  for (const std::string kind : {"member", "producer", "operator"}) {
    auto sql = GrantSql(kind, "o'brien \"x\"", {"orders", "bill-*"});
    ASSERT_TRUE(sql.ok()) << sql.status();
    EXPECT_THAT(*sql,
                HasSubstr("sqlgroup.grant_groups('" + kind +
                          "', 'o''brien \"x\"', '{\"orders\",\"bill-*\"}')"));
    EXPECT_THAT(*sql, HasSubstr("TO \"o'brien \"\"x\"\"\""));
  }
}

TEST(GrantSqlTest, AProducersTopicsAreItsOwnList) {
  auto none = GrantSql("producer", "p", {"orders"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(*none, HasSubstr("sqlgroup.grant_topics('p', '{}')"));
  auto some = GrantSql("producer", "p", {"orders"}, {"events-*", "audit"});
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_THAT(*some, HasSubstr("sqlgroup.grant_topics('p', "
                               "'{\"events-*\",\"audit\"}')"));
  EXPECT_THAT(*some, Not(HasSubstr(":'")));
}

TEST(CheckTopicPatternTest, RefusalsNameTheTopicFlag) {
  EXPECT_TRUE(CheckTopicPattern("events-*").ok());
  const absl::Status s = CheckTopicPattern("bad name");
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--topic 'bad name'"));
}

TEST(GrantSqlTest, UnknownKindIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(GrantSql("owner", "r", {}).status()));
}

TEST(DropPoliciesSqlTest, DropsTheKindsTheGrantDoesNotWrite) {
  const std::string sql = DropPoliciesSql("o'brien", {});
  EXPECT_THAT(sql, HasSubstr("'o''brien', NULL"));
  EXPECT_THAT(sql, HasSubstr("ARRAY['member', 'producer', 'operator']"));
  EXPECT_THAT(DropPoliciesSql("r", {"producer"}),
              HasSubstr("ARRAY['member', 'operator']"));
  EXPECT_EQ(DropPoliciesSql("r", {"member", "producer", "operator"}), "");
}

}  // namespace
}  // namespace sqlgroup::internal
