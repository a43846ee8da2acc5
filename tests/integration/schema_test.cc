// Migrations and the guarantees the schema itself gives: versioning, the
// one-owner-per-part key, reaping that drops a session's parts, and fresh
// epochs. The fences of the hot path are in claim_fence_test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <pqxx/pqxx>
#include <thread>

#include "absl/strings/str_cat.h"
#include "sqlgroup/admin.h"
#include "support/pg_fixture.h"

namespace sqlgroup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::TestDatabase;

std::unique_ptr<Admin> ConnectAdmin(const std::string& dsn,
                                    const std::string& migrations_dir = "") {
  auto admin = Admin::Connect({.dsn = dsn, .migrations_dir = migrations_dir});
  EXPECT_TRUE(admin.ok()) << admin.status();
  return admin.ok() ? std::move(*admin) : nullptr;
}

// Every column of the sqlgroup schema, to compare before and after.
std::string SchemaFingerprint(const std::string& dsn) {
  pqxx::connection conn(dsn);
  pqxx::nontransaction tx(conn);
  std::string out;
  for (const auto& row : tx.exec(
           "SELECT table_name || '.' || column_name || ':' || data_type "
           "FROM information_schema.columns WHERE table_schema = 'sqlgroup' "
           "ORDER BY 1")) {
    out += row[0].as<std::string>() + "\n";
  }
  for (const auto& row :
       tx.exec("SELECT indexname FROM pg_indexes WHERE schemaname = "
               "'sqlgroup' ORDER BY 1")) {
    out += row[0].as<std::string>() + "\n";
  }
  return out;
}

TEST(Schema, MigrationsApplyToAnEmptyDatabase) {
  TestDatabase db;
  auto admin = ConnectAdmin(db.dsn());
  EXPECT_EQ(*admin->SchemaVersion(), 0);
  auto r = admin->Migrate();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->from_version, 0);
  EXPECT_EQ(r->to_version, SchemaVersionKnown());
  EXPECT_THAT(
      r->applied,
      ElementsAre("001_init.sql", "002_lag_index.sql", "003_ownership_log.sql",
                  "004_hot_heartbeats.sql", "005_take_fenced_claims.sql",
                  "006_keyed_items.sql", "007_group_assignor.sql",
                  "008_static_members.sql", "009_part_count_change.sql",
                  "010_idempotent_enqueue.sql", "011_member_connections.sql",
                  "012_targeted_wakeups.sql", "013_revoking_parts.sql",
                  "014_member_versions.sql", "015_members_know_versions.sql",
                  "016_enqueue_fingerprints.sql", "017_operate_items.sql",
                  "018_retention_and_cancel.sql", "019_group_grants.sql",
                  "020_topics.sql", "021_enqueue_plan_kept.sql"));
  EXPECT_TRUE(admin->CheckSchema().ok());
  const std::string schema = SchemaFingerprint(db.dsn());
  for (const char* table :
       {"groups.", "sessions.", "session_parts.", "items.", "dead_items.",
        "schema_migrations.", "ownership_log."}) {
    EXPECT_THAT(schema, HasSubstr(table));
  }
}

TEST(Schema, SecondMigrateChangesNothing) {
  TestDatabase db;
  auto admin = ConnectAdmin(db.dsn());
  ASSERT_TRUE(admin->Migrate().ok());
  const std::string before = SchemaFingerprint(db.dsn());
  auto again = admin->Migrate();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(again->applied, IsEmpty());
  EXPECT_EQ(again->from_version, again->to_version);
  EXPECT_EQ(SchemaFingerprint(db.dsn()), before);
}

TEST(Schema, AGroupsOrderingIsKeyByDefaultAndTheDatabaseRefusesOthers) {
  TestDatabase db;
  auto admin = ConnectAdmin(db.dsn());
  ASSERT_TRUE(admin->Migrate().ok());
  pqxx::connection conn(db.dsn());
  {
    pqxx::work tx(conn);
    tx.exec(
        "INSERT INTO sqlgroup.groups (name, parts) VALUES ('a', 1); "
        "INSERT INTO sqlgroup.groups (name, parts, ordering) "
        "VALUES ('b', 1, 'none')");
    tx.commit();
  }
  {
    pqxx::nontransaction tx(conn);
    EXPECT_EQ(tx.exec1("SELECT string_agg(ordering, ',' ORDER BY name) "
                       "FROM sqlgroup.groups")[0]
                  .as<std::string>(),
              "key,none");
  }
  pqxx::work tx(conn);
  try {
    tx.exec(
        "INSERT INTO sqlgroup.groups (name, parts, ordering) "
        "VALUES ('c', 1, 'fifo')");
    ADD_FAILURE() << "ordering 'fifo' was accepted";
  } catch (const pqxx::check_violation& e) {
    EXPECT_THAT(e.what(), HasSubstr("groups_ordering_valid"));
  }
}

TEST(Schema, ConcurrentMigratorsBothSucceedAndApplyOnce) {
  TestDatabase db;
  std::vector<absl::StatusOr<MigrateResult>> results(4, absl::UnknownError(""));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto admin = Admin::Connect({.dsn = db.dsn()});
      results[i] = admin.ok() ? (*admin)->Migrate()
                              : absl::StatusOr<MigrateResult>(admin.status());
    });
  }
  for (auto& t : threads) t.join();
  int applied = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    applied += static_cast<int>(r->applied.size());
  }
  EXPECT_EQ(applied, SchemaVersionKnown());
}

TEST(Schema, NewerRecordedVersionIsRefusedWithAClearMessage) {
  TestDatabase db;
  auto admin = ConnectAdmin(db.dsn());
  ASSERT_TRUE(admin->Migrate().ok());
  {
    pqxx::connection conn(db.dsn());
    pqxx::work tx(conn);
    tx.exec(
        "INSERT INTO sqlgroup.schema_migrations (version, name) "
        "VALUES (999, '999_future.sql')");
    tx.commit();
  }
  const std::string before = SchemaFingerprint(db.dsn());
  auto r = admin->Migrate();
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("version 999"));
  EXPECT_THAT(r.status().message(), HasSubstr("upgrade"));
  EXPECT_EQ(admin->CheckSchema().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SchemaFingerprint(db.dsn()), before);
}

TEST(Schema, MissingSchemaSaysToRunMigrate) {
  TestDatabase db;
  auto admin = ConnectAdmin(db.dsn());
  const absl::Status s = admin->CheckSchema();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("sqlgroup migrate"));
  EXPECT_EQ(admin->ListGroups().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(Schema, MigrationsFolderMatchesTheBuiltInOnes) {
  TestDatabase db;
  const char* src = std::getenv("SQLGROUP_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  auto admin = ConnectAdmin(db.dsn(), std::string(src) + "/sql");
  auto r = admin->Migrate();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->to_version, SchemaVersionKnown());
}

// A database at the previous schema version, with a group, keyed items
// waiting and a part owned, upgrades in place: everything kept, the take
// recorded under the group's part count.
TEST(Schema, UpgradeFromThePreviousVersionKeepsGroupsItemsAndTakes) {
  TestDatabase db;
  const char* src = std::getenv("SQLGROUP_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  const std::filesystem::path previous =
      std::filesystem::path(::testing::TempDir()) / "sqlgroup-previous-sql";
  std::filesystem::remove_all(previous);
  std::filesystem::create_directories(previous);
  const int last = SchemaVersionKnown();
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(src) + "/sql")) {
    const std::string name = entry.path().filename();
    if (entry.is_regular_file() && name.size() > 4 && std::isdigit(name[0]) &&
        std::stoi(name.substr(0, 3)) < last) {
      std::filesystem::copy_file(entry.path(), previous / name);
    }
  }
  auto old = ConnectAdmin(db.dsn(), previous.string());
  auto r = old->Migrate();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->to_version, last - 1);
  {
    pqxx::connection conn(db.dsn());
    pqxx::work tx(conn);
    tx.exec("INSERT INTO sqlgroup.groups (name, parts) VALUES ('g', 8)");
    tx.exec(
        "SELECT sqlgroup.enqueue('g', 'k' || (i % 5), convert_to(i::text, "
        "'UTF8')) FROM generate_series(1, 50) i");
    // A member of this release running on the previous schema, as a
    // rolling upgrade leaves it before `migrate` (schema 17 accepts no
    // member of the release before: its pauses are enforced in the
    // members' claims).
    tx.exec_params(
        "INSERT INTO sqlgroup.sessions (id, group_name, member_version, "
        "member_schema) VALUES ('aaaaaaaa-0000-4000-8000-000000000000', 'g', "
        "$1, $2)",
        absl::StrCat("0.", last, ".0"), last);
    tx.exec(
        "INSERT INTO sqlgroup.session_parts (group_name, part, session_id, "
        "parts_of) VALUES ('g', 3, 'aaaaaaaa-0000-4000-8000-000000000000', "
        "8)");
    tx.commit();
  }
  auto admin = ConnectAdmin(db.dsn());
  r = admin->Migrate();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->from_version, last - 1);
  EXPECT_EQ(r->to_version, last);
  EXPECT_EQ(r->applied.size(), 1u);
  EXPECT_TRUE(admin->CheckSchema().ok());
  pqxx::connection conn(db.dsn());
  pqxx::nontransaction tx(conn);
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM sqlgroup.items WHERE "
                     "group_name = 'g'")[0]
                .as<int>(),
            50);
  EXPECT_EQ(tx.exec1("SELECT parts_of FROM sqlgroup.session_parts WHERE "
                     "group_name = 'g' AND part = 3")[0]
                .as<int>(),
            8);
  auto d = admin->DescribeGroup("g");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->config.parts, 8);
  // What the new version adds works on the upgraded database.
  EXPECT_EQ(tx.exec1("SELECT sqlgroup.enqueue('g', 'k', 'x', '0', 'r') = "
                     "sqlgroup.enqueue('g', 'k', 'x', '0', 'r')")[0]
                .as<bool>(),
            true);
}

TEST(Schema, MissingMigrationsFolderIsNotFoundAndChangesNothing) {
  TestDatabase db;
  auto admin = ConnectAdmin(db.dsn(), "/nonexistent/sql");
  auto r = admin->Migrate();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/sql"));
  EXPECT_EQ(*admin->SchemaVersion(), 0);
}

// A migrated database with one group, two sessions and part 0 owned by the
// first; ids are fixed so the statements below read plainly.
class OwnershipTest : public ::testing::Test {
 protected:
  static constexpr char kA[] = "aaaaaaaa-0000-4000-8000-000000000000";
  static constexpr char kB[] = "bbbbbbbb-0000-4000-8000-000000000000";

  void SetUp() override {
    auto admin = ConnectAdmin(db_.dsn());
    ASSERT_TRUE(admin->Migrate().ok());
    ASSERT_TRUE(admin->CreateGroup({.name = "g", .parts = 8}).ok());
    conn_ = std::make_unique<pqxx::connection>(db_.dsn());
    pqxx::work tx(*conn_);
    tx.exec_params(
        "INSERT INTO sqlgroup.sessions (id, group_name, member_schema) "
        "VALUES ($1, 'g', $3), ($2, 'g', $3)",
        kA, kB, SchemaVersionKnown());
    epoch_ = tx.exec_params1(
                   "INSERT INTO sqlgroup.session_parts (group_name, "
                   "part, session_id, parts_of) VALUES ('g', 0, $1, 8) "
                   "RETURNING epoch",
                   kA)[0]
                 .as<int64_t>();
    tx.commit();
  }

  TestDatabase db_;
  std::unique_ptr<pqxx::connection> conn_;
  int64_t epoch_ = 0;
};

TEST_F(OwnershipTest, ReapingTheSessionDropsItsParts) {
  pqxx::work tx(*conn_);
  tx.exec_params("DELETE FROM sqlgroup.sessions WHERE id = $1", kA);
  tx.commit();
  pqxx::nontransaction check(*conn_);
  EXPECT_EQ(
      check.exec1("SELECT count(*) FROM sqlgroup.session_parts")[0].as<int>(),
      0);
}

TEST_F(OwnershipTest, TheDatabaseRefusesASecondOwnerOfAPart) {
  pqxx::work tx(*conn_);
  EXPECT_THROW(tx.exec_params("INSERT INTO sqlgroup.session_parts "
                              "(group_name, part, session_id, parts_of) "
                              "VALUES ('g', 0, $1, 8)",
                              kB),
               pqxx::unique_violation);
}

TEST_F(OwnershipTest, RetakingAPartGivesAFreshEpoch) {
  pqxx::work tx(*conn_);
  tx.exec("DELETE FROM sqlgroup.session_parts WHERE part = 0");
  const int64_t again =
      tx.exec_params1(
            "INSERT INTO sqlgroup.session_parts (group_name, part, "
            "session_id, parts_of) VALUES ('g', 0, $1, 8) RETURNING epoch",
            kA)[0]
          .as<int64_t>();
  EXPECT_GT(again, epoch_);
}

}  // namespace
}  // namespace sqlgroup
