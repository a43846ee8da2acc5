// A live group's part count changes (group alter --parts, Admin::AlterParts)
// against a real PostgreSQL: under load every item is acknowledged once,
// each key in order, and no two takes of overlapping ranges ever coexist;
// the database itself refuses a take whose range overlaps a part of the
// old count still owned; a second change waits for the first; bad input
// changes nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <pqxx/pqxx>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "keyspace.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/producer.h"
#include "store/member_store.h"
#include "support/consumer_fixture.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using ::testing::HasSubstr;
using testing::WaitFor;

class PartsChangeTest : public testing::ConsumerFixture {
 protected:
  void SetUp() override {
    ConsumerFixture::SetUp();
    pqxx::work tx(*conn_);
    tx.exec(
        "CREATE TABLE keyed_results (id uuid, key text, seq int, "
        "acked_at timestamptz DEFAULT clock_timestamp())");
    tx.exec(absl::StrCat("GRANT INSERT ON keyed_results TO ",
                         testing::kMemberRole));
    tx.commit();
  }

  // Writes the item's key and number (its payload) in the acknowledging
  // transaction.
  ConsumerOptions Recording(const std::string& group) {
    return Options(group, [](const Item& item, AckTransaction& ack) {
      ack.work().exec_params(
          "INSERT INTO keyed_results (id, key, seq) VALUES ($1::uuid, $2, "
          "$3::int)",
          item.id, item.key.value_or(""), item.payload);
      return absl::OkStatus();
    });
  }

  // Items numbered 1, 2, 3, ... within each of `keys` keys, continuing
  // from `next`.
  void ProduceKeyed(Producer& producer, int keys, int per_key,
                    std::vector<int>& next) {
    std::vector<NewItem> items;
    for (int i = 0; i < per_key; ++i) {
      for (int k = 0; k < keys; ++k) {
        items.push_back({absl::StrCat("key-", k), absl::StrCat(++next[k]), {}});
      }
    }
    ASSERT_TRUE(producer.Enqueue(items).ok());
  }

  // The change is over: no part of another count is owned any more.
  bool ChangeDone(const std::string& group) {
    auto d = admin_->DescribeGroup(group, /*count_lag=*/false);
    return d.ok() && d->last_parts_change &&
           d->last_parts_change->old_parts_owned == 0;
  }

  // Pairs of takes, of any part counts, whose key ranges overlap and whose
  // ownership intervals overlap in time (the ownership log).
  int64_t OverlappingTakes(const std::string& group) {
    return Count(absl::StrCat(
        "SELECT count(*) FROM sqlgroup.ownership_log x "
        "JOIN sqlgroup.ownership_log y ON x.group_name = y.group_name "
        "AND x.epoch < y.epoch "
        "AND x.part * y.parts_of < (y.part + 1) * x.parts_of "
        "AND y.part * x.parts_of < (x.part + 1) * y.parts_of "
        "WHERE x.group_name = '",
        group,
        "' AND y.acquired_at < coalesce(x.released_at, 'infinity') "
        "AND x.acquired_at < coalesce(y.released_at, 'infinity')"));
  }

  // A session that owns part `part` of `parts` and heartbeats for an hour
  // without a process: a member that has not let go yet. Its id sorts
  // last, so a real member is first in the lexical order.
  std::string FakeOwner(const std::string& group, int part, int parts) {
    pqxx::work tx(*conn_);
    const std::string session =
        tx.exec_params1(
              "INSERT INTO sqlgroup.sessions (id, group_name, heartbeated_at, "
              "member_schema) VALUES ('ffffffff-ffff-4fff-bfff-ffffffffffff', "
              "$1, clock_timestamp() + interval '1 hour', (SELECT "
              "max(version) FROM sqlgroup.schema_migrations)) RETURNING "
              "id::text",
              group)[0]
            .as<std::string>();
    tx.exec_params(
        "INSERT INTO sqlgroup.session_parts (group_name, part, session_id, "
        "parts_of) VALUES ($1, $2, $3::uuid, $4)",
        group, part, session, parts);
    tx.commit();
    return session;
  }
};

TEST_F(PartsChangeTest, ChangesUnderLoadKeepEveryKeyInOrderAndMoveNoItem) {
  CreateGroup("g", 16);
  auto producer = Producer::Create({.dsn = db_.dsn(), .group = "g"});
  ASSERT_TRUE(producer.ok()) << producer.status();
  std::vector<std::unique_ptr<Consumer>> members;
  for (int i = 0; i < 3; ++i) members.push_back(Start(Recording("g")));
  constexpr int kKeys = 40;
  std::vector<int> next(kKeys, 0);
  ProduceKeyed(**producer, kKeys, 10, next);

  for (int parts : {40, 8, 16}) {
    ProduceKeyed(**producer, kKeys, 10, next);
    auto change = admin_->AlterParts("g", parts);
    ASSERT_TRUE(change.ok()) << change.status();
    EXPECT_EQ(change->to_parts, parts);
    ProduceKeyed(**producer, kKeys, 10, next);
    ASSERT_TRUE(WaitFor([&] { return ChangeDone("g"); }, absl::Seconds(20)));
    // Every part of the new count owned, by the members.
    ASSERT_TRUE(WaitFor(
        [&] {
          return Count(absl::StrCat("SELECT count(*) FROM "
                                    "sqlgroup.session_parts WHERE parts_of = ",
                                    parts)) == parts;
        },
        absl::Seconds(20)));
  }
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  const int64_t produced = kKeys * 70;
  EXPECT_EQ(Count("SELECT count(*) FROM keyed_results"), produced);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM keyed_results"), produced);
  // Within each key, in the order of acknowledgement, numbers only grow.
  EXPECT_EQ(Count("SELECT count(*) FROM (SELECT seq, lag(seq) OVER "
                  "(PARTITION BY key ORDER BY acked_at, id) AS prev "
                  "FROM keyed_results) s WHERE seq < prev"),
            0);
  EXPECT_EQ(OverlappingTakes("g"), 0);
  // Takes were recorded under each count the group went through.
  EXPECT_EQ(Count("SELECT count(DISTINCT parts_of) FROM "
                  "sqlgroup.ownership_log WHERE group_name = 'g'"),
            3);  // 16, 40, 8 (16 again)
  for (auto& m : members) EXPECT_TRUE(m->Leave().ok());
}

TEST_F(PartsChangeTest, TheDatabaseRefusesATakeOverlappingAnOldPartStillOwned) {
  CreateGroup("g", 4, /*ttl=*/absl::Seconds(30));
  // Part 1 of 4 is held by a member that has not let go yet.
  const std::string holder = FakeOwner("g", 1, 4);
  auto change = admin_->AlterParts("g", 8);
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_EQ(change->from_parts, 4);

  auto d = admin_->DescribeGroup("g", /*count_lag=*/false);
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(d->last_parts_change.has_value());
  EXPECT_EQ(d->last_parts_change->old_parts_owned, 1);

  // A second change waits for the first, and says why.
  auto again = admin_->AlterParts("g", 12);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(again.status().message()),
              HasSubstr("still changing its part count from 4 to 8: 1 "
                        "part(s) of the 4-part layout are still owned"));
  EXPECT_EQ(Count("SELECT parts FROM sqlgroup.groups WHERE name = 'g'"), 8);

  // A member first in the order targets parts 0..3 of 8 (the holder
  // counts as a live member), and takes 0 and 1 but not 2 and 3, which lie
  // in part 1 of 4.
  auto m = Start(Recording("g"));
  ASSERT_TRUE(
      WaitFor([&] { return m->owned_parts().size() == 2; }, absl::Seconds(10)));
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(m->owned_parts().size(), 2u);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.session_parts "
                  "WHERE parts_of = 8 AND part IN (2, 3)"),
            0);
  // Nor may anyone take a part of the old count any more.
  {
    pqxx::connection conn(db_.dsn());
    auto taken = store::TakeParts(conn, "g", holder, {0}, 4);
    ASSERT_TRUE(taken.ok()) << taken.status();
    EXPECT_TRUE(taken->empty());
  }
  // Once the old part is let go, its ranges are taken. The holder leaves
  // as a member does: its session deleted and the group told (without the
  // NOTIFY, a member that read the membership just before the delete and
  // took parts 2 and 3 just after it would see its target complete and
  // wait for its safety poll, 30 s here).
  {
    pqxx::work tx(*conn_);
    tx.exec_params("DELETE FROM sqlgroup.sessions WHERE id = $1::uuid", holder);
    tx.exec_params("SELECT pg_notify($1, $2)", store::kChannel,
                   store::MembershipChanged("g"));
    tx.commit();
  }
  EXPECT_TRUE(
      WaitFor([&] { return m->owned_parts().size() == 8; }, absl::Seconds(10)));
  EXPECT_TRUE(ChangeDone("g"));
  EXPECT_TRUE(admin_->AlterParts("g", 12).ok());
  EXPECT_TRUE(m->Leave().ok());
}

TEST_F(PartsChangeTest, BadPartCountsAreRefusedAndChangeNothing) {
  CreateGroup("g", 4);
  for (int parts : {0, -1, 4097}) {
    auto r = admin_->AlterParts("g", parts);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << parts;
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr("parts must be between 1 and 4096"));
  }
  EXPECT_EQ(admin_->AlterParts("nope", 8).status().code(),
            absl::StatusCode::kNotFound);
  auto same = admin_->AlterParts("g", 4);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->from_parts, same->to_parts);
  auto d = admin_->DescribeGroup("g", /*count_lag=*/false);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->config.parts, 4);
  EXPECT_FALSE(d->last_parts_change.has_value());
}

}  // namespace
}  // namespace sqlgroup
