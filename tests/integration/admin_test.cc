// Group administration against a real database: validation, life cycle,
// describe with owners and lag.
#include "sqlgroup/admin.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <pqxx/pqxx>

#include "keyspace.h"
#include "support/pg_fixture.h"

namespace sqlgroup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TestDatabase;

class AdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    admin_ = testing::MigratedAdmin(db_.dsn());
    ASSERT_NE(admin_, nullptr);
  }
  TestDatabase db_;
  std::unique_ptr<Admin> admin_;
};

struct BadConfig {
  GroupConfig config;
  const char* message;
};

TEST_F(AdminTest, InvalidGroupsAreRefusedNamingTheFieldAndNothingIsStored) {
  const BadConfig cases[] = {
      {{.name = "g", .parts = 0}, "parts must be between 1 and 4096"},
      {{.name = "g", .parts = 5000}, "parts must be between 1 and 4096"},
      {{.name = "", .parts = 4}, "group name"},
      {{.name = "-x", .parts = 4}, "group name"},
      {{.name = "a b", .parts = 4}, "group name"},
      {{.name = "g",
        .parts = 4,
        .session_ttl = absl::Seconds(1),
        .heartbeat_interval = absl::Seconds(1)},
       "at most half the session ttl"},
      {{.name = "g", .parts = 4, .heartbeat_interval = absl::ZeroDuration()},
       "heartbeat must be positive"},
      {{.name = "g", .parts = 4, .ordering = static_cast<Ordering>(7)},
       "ordering must be key or none"},
  };
  for (const BadConfig& c : cases) {
    const absl::Status s = admin_->CreateGroup(c.config);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  EXPECT_TRUE(admin_->ListGroups()->empty());
}

TEST_F(AdminTest, GroupLifeCycle) {
  ASSERT_TRUE(admin_->CreateGroup({.name = "b", .parts = 3}).ok());
  ASSERT_TRUE(admin_->CreateGroup({.name = "a", .parts = 4096}).ok());
  EXPECT_EQ(admin_->CreateGroup({.name = "a", .parts = 1}).code(),
            absl::StatusCode::kAlreadyExists);
  auto groups = admin_->ListGroups();
  ASSERT_TRUE(groups.ok());
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_EQ((*groups)[0].name, "a");
  EXPECT_EQ((*groups)[0].parts, 4096);

  ASSERT_TRUE(
      admin_->AlterGroup("b", absl::Seconds(10), absl::Milliseconds(500)).ok());
  auto b = admin_->GetGroup("b");
  EXPECT_EQ(b->session_ttl, absl::Seconds(10));
  EXPECT_EQ(b->heartbeat_interval, absl::Milliseconds(500));
  EXPECT_EQ(
      admin_->AlterGroup("b", absl::Milliseconds(600), std::nullopt).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(admin_->AlterGroup("zz", absl::Seconds(9), std::nullopt).code(),
            absl::StatusCode::kNotFound);

  ASSERT_TRUE(admin_->DeleteGroup("b").ok());
  EXPECT_EQ(admin_->DeleteGroup("b").code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(admin_->GetGroup("b").status().message(),
              HasSubstr("sqlgroup group create b"));
}

TEST_F(AdminTest, TheOrderingIsStoredWithTheGroupAndKeyByDefault) {
  ASSERT_TRUE(admin_->CreateGroup({.name = "keyed", .parts = 2}).ok());
  ASSERT_TRUE(
      admin_
          ->CreateGroup(
              {.name = "loose", .parts = 2, .ordering = Ordering::kNone})
          .ok());
  EXPECT_EQ(admin_->GetGroup("keyed")->ordering, Ordering::kKey);
  EXPECT_EQ(admin_->GetGroup("loose")->ordering, Ordering::kNone);
  auto groups = admin_->ListGroups();
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_EQ((*groups)[0].ordering, Ordering::kKey);
  EXPECT_EQ((*groups)[1].ordering, Ordering::kNone);
  auto d = admin_->DescribeGroup("loose", /*count_lag=*/false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->config.ordering, Ordering::kNone);
  // Altering the TTL keeps the ordering.
  ASSERT_TRUE(admin_->AlterGroup("loose", absl::Seconds(8), std::nullopt).ok());
  EXPECT_EQ(admin_->GetGroup("loose")->ordering, Ordering::kNone);
  // What the database holds is the name the CLI and SQL use.
  pqxx::connection conn(db_.dsn());
  pqxx::nontransaction tx(conn);
  EXPECT_EQ(tx.exec1("SELECT string_agg(ordering, ',' ORDER BY name) "
                     "FROM sqlgroup.groups")[0]
                .as<std::string>(),
            "key,none");
}

TEST_F(AdminTest, DescribeShowsMembersOwnersAndLagPerPart) {
  ASSERT_TRUE(admin_->CreateGroup({.name = "g", .parts = 4}).ok());
  ASSERT_TRUE(admin_->CreateGroup({.name = "other", .parts = 4}).ok());
  {
    pqxx::connection conn(db_.dsn());
    pqxx::work tx(conn);
    tx.exec(
        "INSERT INTO sqlgroup.sessions (id, group_name, host, pid, "
        "instance, member_schema) VALUES ('11111111-0000-4000-8000-"
        "000000000000', 'g', 'h1', 42, 'worker-1', (SELECT max(version) "
        "FROM sqlgroup.schema_migrations))");
    tx.exec(
        "INSERT INTO sqlgroup.session_parts (group_name, part, "
        "session_id, parts_of) SELECT 'g', 2, "
        "'11111111-0000-4000-8000-000000000000', parts "
        "FROM sqlgroup.groups WHERE name = 'g'");
    // Two items in part 0, one in part 3 (enqueued a minute ago), and one in
    // another group that must not count.
    tx.exec_params(
        "INSERT INTO sqlgroup.items (group_name, id, enqueued_at) "
        "VALUES ('g', $1, now()), ('g', $2, now()), "
        "('g', $3, now() - interval '60 seconds'), "
        "('other', $1, now())",
        FormatUuid(PartRange(0, 4).first), FormatUuid(PartRange(0, 4).last),
        FormatUuid(PartRange(3, 4).last));
    tx.commit();
  }
  auto d = admin_->DescribeGroup("g");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->members.size(), 1u);
  EXPECT_EQ(d->members[0].instance, "worker-1");
  EXPECT_EQ(d->members[0].pid, 42);
  EXPECT_FALSE(d->members[0].expired);
  EXPECT_THAT(d->members[0].parts, ElementsAre(2));
  ASSERT_EQ(d->parts.size(), 4u);
  EXPECT_EQ(d->parts[2].owner_session, "11111111-0000-4000-8000-000000000000");
  EXPECT_GT(d->parts[2].epoch, 0);
  EXPECT_EQ(d->parts[0].owner_session, "");
  EXPECT_EQ(d->parts[0].waiting_items, 2);
  EXPECT_EQ(d->parts[1].waiting_items, 0);
  EXPECT_EQ(d->parts[3].waiting_items, 1);
  EXPECT_GE(d->parts[3].oldest_age, absl::Seconds(59));
  EXPECT_EQ(d->parts[1].oldest_age, absl::ZeroDuration());
}

TEST_F(AdminTest, DeletingAGroupRemovesItsItemsButNotOtherGroups) {
  ASSERT_TRUE(admin_->CreateGroup({.name = "g", .parts = 2}).ok());
  ASSERT_TRUE(admin_->CreateGroup({.name = "h", .parts = 2}).ok());
  pqxx::connection conn(db_.dsn());
  {
    pqxx::work tx(conn);
    tx.exec("INSERT INTO sqlgroup.items (group_name) VALUES ('g'), ('h')");
    tx.commit();
  }
  ASSERT_TRUE(admin_->DeleteGroup("g").ok());
  pqxx::nontransaction tx(conn);
  EXPECT_EQ(tx.exec1("SELECT string_agg(group_name, ',') FROM "
                     "sqlgroup.items")[0]
                .as<std::string>(),
            "h");
}

}  // namespace
}  // namespace sqlgroup
