// Members' versions against a real PostgreSQL (docs/UPGRADING.md): a
// session records its member's release, `migrate` refuses a schema a live
// member could not run against and --force fences that member, the
// database itself refuses a session that knows too old a schema, a member
// that joined before schema 14 records its version when told, and a
// member stops at once when the schema no longer accepts it. The whole
// upgrade with a binary built from git history is rolling_upgrade_test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <filesystem>
#include <pqxx/pqxx>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "grants.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/version.h"
#include "support/pg_fixture.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using testing::ExecSql;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::TestDatabase;
using testing::WaitFor;

constexpr char kOld[] = "aaaaaaaa-0000-4000-8000-000000000000";

// An Admin whose migrations stop at `version` (a copy of sql/ up to it).
std::unique_ptr<Admin> AdminUpTo(const std::string& dsn, int version) {
  const char* src = std::getenv("SQLGROUP_SOURCE_DIR");
  EXPECT_NE(src, nullptr);
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) /
      absl::StrCat("sqlgroup-sql-upto-", version, "-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(src) + "/sql")) {
    const std::string name = entry.path().filename();
    if (entry.is_regular_file() && name.size() > 4 && std::isdigit(name[0]) &&
        std::stoi(name.substr(0, 3)) <= version) {
      std::filesystem::copy_file(entry.path(), dir / name);
    }
  }
  auto admin = Admin::Connect({.dsn = dsn, .migrations_dir = dir.string()});
  EXPECT_TRUE(admin.ok()) << admin.status();
  return admin.ok() ? std::move(*admin) : nullptr;
}

std::unique_ptr<Admin> Current(const std::string& dsn) {
  auto admin = Admin::Connect({.dsn = dsn});
  EXPECT_TRUE(admin.ok()) << admin.status();
  return admin.ok() ? std::move(*admin) : nullptr;
}

class MemberVersionsTest : public ::testing::Test {
 protected:
  void CreateGroup(Admin& admin) {
    ASSERT_TRUE(
        admin
            .CreateGroup({.name = "g",
                          .parts = 4,
                          .session_ttl = absl::Seconds(2),
                          .heartbeat_interval = absl::Milliseconds(400)})
            .ok());
  }
  // The member grants on a database at an older schema, as the release of
  // that schema gave them: on 13, member.sql without the version columns
  // (`sqlgroup grant` of this release refuses an older schema).
  std::string MemberDsnAt(int schema) {
    {
      // The role is the cluster's, created with the grants of a database
      // at this release's schema.
      TestDatabase current;
      testing::MigratedAdmin(current.dsn());
      (void)current.MemberDsn();
    }
    auto sql = internal::GrantSql("member", testing::kMemberRole, {});
    EXPECT_TRUE(sql.ok());
    std::string grants = *sql;
    const std::string role = absl::StrCat("\"", testing::kMemberRole, "\";");
    // Schema 20 brought topics: what members may read of them goes.
    if (schema < 20) {
      grants = grants.substr(0, grants.find("-- Topics (schema 20)"));
    }
    // Schema 19 scoped roles to groups: its lines go.
    if (schema < 19) {
      std::vector<std::string> kept;
      for (absl::string_view line : absl::StrSplit(grants, '\n')) {
        if (!absl::StrContains(line, "grant_groups") &&
            !absl::StrContains(line, "require_grant")) {
          kept.emplace_back(line);
        }
      }
      grants = absl::StrJoin(kept, "\n");
    }
    // Schema 18 added the function members expire dead letters with.
    if (schema < 18) {
      grants = absl::StrReplaceAll(
          grants, {{absl::StrCat("GRANT EXECUTE ON FUNCTION "
                                 "sqlgroup.dead_expire(text, integer) TO ",
                                 role),
                    ""}});
    }
    // Schema 17 added the pauses members read.
    if (schema < 17) {
      grants = absl::StrReplaceAll(
          grants,
          {{absl::StrCat("GRANT SELECT ON sqlgroup.pauses TO ", role), ""}});
    }
    if (schema < 14) {
      grants = absl::StrReplaceAll(grants,
                                   {{", member_version, member_schema", ""}});
    }
    ExecSql(db_.dsn(), grants);
    return absl::StrCat(
        "host=127.0.0.1 port=", testing::SharedPostgres().port(),
        " dbname=", db_.name(), " user=", testing::kMemberRole,
        " password=", testing::kMemberPassword);
  }
  ConsumerOptions Options(const std::string& dsn) {
    ConsumerOptions o;
    o.dsn = dsn;
    o.group = "g";
    o.workers = 2;
    o.rebalance_poll = absl::Milliseconds(300);
    o.handler = [this](const Item&, AckTransaction&) {
      ++handled_;
      return absl::OkStatus();
    };
    return o;
  }
  std::unique_ptr<Consumer> Start(const std::string& dsn) {
    auto c = Consumer::Create(Options(dsn));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    EXPECT_TRUE((*c)->Start().ok());
    return std::move(*c);
  }
  // A member of a release before 0.15, as its session looks: no version.
  void OldMemberSession() {
    ExecSql(db_.dsn(),
            absl::StrCat("INSERT INTO sqlgroup.sessions (id, group_name, host, "
                         "pid) VALUES ('",
                         kOld, "', 'g', 'oldhost', 4242)"));
  }
  int64_t Count(const std::string& sql) {
    pqxx::connection conn(db_.dsn());
    pqxx::nontransaction tx(conn);
    return tx.exec1(sql)[0].as<int64_t>();
  }
  // Through the SQL function, which works whatever the schema says of
  // members.
  void Produce(int n) {
    ExecSql(db_.dsn(), absl::StrCat("SELECT sqlgroup.enqueue('g', 'k' || i, "
                                    "'x'::bytea, '0'::interval) FROM "
                                    "generate_series(1, ",
                                    n, ") i"));
  }

  TestDatabase db_;
  std::atomic<int> handled_{0};
};

TEST_F(MemberVersionsTest, ASessionRecordsItsMembersReleaseForDescribe) {
  auto admin = testing::MigratedAdmin(db_.dsn());
  CreateGroup(*admin);
  auto c = Start(db_.MemberDsn());
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return !c->owned_parts().empty(); }, absl::Seconds(10)));
  auto d = admin->DescribeGroup("g");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->schema_version, kSchemaVersion);
  ASSERT_EQ(d->members.size(), 1u);
  EXPECT_EQ(d->members[0].version, kVersion);
  EXPECT_EQ(d->members[0].schema, kSchemaVersion);
}

// Schema 15 needs members that know 14: the member of 0.13 (no version)
// is named, the one of this release is not, and nothing is applied; with
// --force its session ends (its take as a fence) and it cannot register
// again.
TEST_F(MemberVersionsTest,
       MigrateRefusesWhileAnOlderMemberLivesAndForceFences) {
  auto old = AdminUpTo(db_.dsn(), 14);
  ASSERT_TRUE(old->Migrate().ok());
  CreateGroup(*old);
  OldMemberSession();
  // Its take of part 0, in session_parts and the ownership history.
  ExecSql(db_.dsn(),
          absl::StrCat("WITH t AS (INSERT INTO sqlgroup.session_parts "
                       "(group_name, part, session_id, parts_of) VALUES ('g', "
                       "0, '",
                       kOld,
                       "', 4) RETURNING epoch) INSERT INTO "
                       "sqlgroup.ownership_log (group_name, part, epoch, "
                       "session_id, parts_of) SELECT 'g', 0, epoch, '",
                       kOld, "', 4 FROM t"));
  auto c = Start(MemberDsnAt(14));
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return !c->owned_parts().empty(); }, absl::Seconds(10)));
  // Kept alive while migrate looks.
  std::atomic<bool> beating{true};
  std::thread heart([&] {
    while (beating) {
      ExecSql(db_.dsn(), absl::StrCat("UPDATE sqlgroup.sessions SET "
                                      "heartbeated_at = clock_timestamp() "
                                      "WHERE id = '",
                                      kOld, "'"));
      absl::SleepFor(absl::Milliseconds(200));
    }
  });
  auto admin = Current(db_.dsn());
  auto refused = admin->Migrate();
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(refused.status().message());
  EXPECT_THAT(message, HasSubstr("015_members_know_versions.sql"));
  EXPECT_THAT(message, HasSubstr("host oldhost pid 4242"));
  EXPECT_THAT(message, HasSubstr("a release before 0.15"));
  EXPECT_THAT(message, Not(HasSubstr(absl::StrCat("pid ", getpid()))));
  EXPECT_THAT(message, HasSubstr("--force"));
  EXPECT_EQ(*admin->SchemaVersion(), 14);

  MigrateOptions force;
  force.force = true;
  auto forced = admin->Migrate(force);
  beating = false;
  heart.join();
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_EQ(forced->to_version, kSchemaVersion);
  ASSERT_EQ(forced->fenced.size(), 1u);
  EXPECT_THAT(forced->fenced[0], HasSubstr("pid 4242"));
  EXPECT_EQ(Count(absl::StrCat("SELECT count(*) FROM sqlgroup.sessions "
                               "WHERE id = '",
                               kOld, "'")),
            0);
  EXPECT_EQ(Count(absl::StrCat("SELECT count(*) FROM sqlgroup.ownership_log "
                               "WHERE session_id = '",
                               kOld, "' AND released_by = 'fenced'")),
            1);
  // Its part goes to the member that stays.
  ASSERT_TRUE(
      WaitFor([&] { return c->owned_parts().size() == 4; }, absl::Seconds(10)));
  // Registering again, as a member of 0.13 does when its session is gone:
  // the database says why not.
  pqxx::connection conn(db_.MemberDsn());
  pqxx::work tx(conn);
  try {
    tx.exec(
        "INSERT INTO sqlgroup.sessions (group_name, host, pid) VALUES "
        "('g', 'oldhost', 4242)");
    ADD_FAILURE() << "a session without a version was registered";
  } catch (const pqxx::sql_error& e) {
    EXPECT_EQ(e.sqlstate(), "3F000");
    EXPECT_THAT(e.what(), HasSubstr("a release before 0.15"));
    // The schema's newest migration says which members it accepts.
    const int64_t accepted = Count("SELECT sqlgroup.members_from()");
    EXPECT_THAT(e.what(), HasSubstr(absl::StrCat("knows schema ", accepted,
                                                 " (`sqlgroup --version`")));
  }
}

// A member of this release that joined on schema 13 (which cannot hold a
// version) records it when migrate applies 14, under the grants of 0.13,
// so migrate goes on to 15 without naming it.
// On schema 17 (before a rolling upgrade's migrate), an Admin of this
// release refuses a dead-letter retention, saying to migrate, and leaves
// the group as it was; a member runs and reads the group's facts there.
TEST_F(MemberVersionsTest, ADeadRetentionWaitsForSchema18) {
  auto old = AdminUpTo(db_.dsn(), 17);
  ASSERT_NE(old, nullptr);
  ASSERT_TRUE(old->Migrate().ok());
  CreateGroup(*old);
  auto current = Current(db_.dsn());
  ASSERT_NE(current, nullptr);
  const absl::Status s = current->AlterDeadRetention("g", absl::Hours(1));
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("sqlgroup migrate"));
  GroupConfig config{.name = "h", .parts = 2};
  config.dead_retention = absl::Hours(1);
  EXPECT_TRUE(absl::IsFailedPrecondition(current->CreateGroup(config)));
  EXPECT_TRUE(absl::IsNotFound(current->GetGroup("h").status()));
  auto g = current->GetGroup("g");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->dead_retention, absl::ZeroDuration());

  ExecSql(db_.dsn(),
          "INSERT INTO sqlgroup.dead_items (group_name, id, payload, "
          "enqueued_at, attempts) VALUES ('g', gen_random_uuid(), 'x', "
          "now() - interval '1 day', 1)");
  prometheus::Registry registry;
  ConsumerOptions o = Options(MemberDsnAt(17));
  o.metrics = &registry;
  o.lag_interval = absl::Milliseconds(100);
  auto c = Consumer::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->Start().ok());
  bool reported = WaitFor(
      [&] {
        for (const auto& family : registry.Collect()) {
          if (family.name == "sqlgroup_dead_items" && !family.metric.empty()) {
            return family.metric[0].gauge.value == 1.0;
          }
        }
        return false;
      },
      absl::Seconds(10));
  EXPECT_TRUE(reported);
  EXPECT_TRUE((*c)->Stop().ok());
}

TEST_F(MemberVersionsTest, AMemberThatJoinedOnSchema13IsNotTakenForAnOldOne) {
  auto old = AdminUpTo(db_.dsn(), 13);
  ASSERT_TRUE(old->Migrate().ok());
  CreateGroup(*old);
  auto c = Start(MemberDsnAt(13));
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return c->owned_parts().size() == 4; }, absl::Seconds(10)));
  // Granting the new columns before they exist says what to do.
  auto admin = Current(db_.dsn());
  const absl::Status grant =
      admin->GrantRoles({.member_role = testing::kMemberRole});
  EXPECT_EQ(grant.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(grant.message(), HasSubstr("run `sqlgroup migrate` first"));

  auto r = admin->Migrate();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->from_version, 13);
  EXPECT_EQ(r->to_version, kSchemaVersion);
  EXPECT_TRUE(r->fenced.empty());
  EXPECT_EQ(Count(absl::StrCat("SELECT count(*) FROM sqlgroup.sessions "
                               "WHERE member_schema = ",
                               kSchemaVersion)),
            1);
  EXPECT_EQ(c->state(), Consumer::State::kRunning);
  Produce(20);
  EXPECT_TRUE(WaitFor([&] { return handled_ == 20; }, absl::Seconds(20)));
}

// A forced migration, or a binary rolled back, leaves a member on a schema
// that does not accept it: it stops at once and takes no more items; a new
// one is refused at Create, saying both versions.
TEST_F(MemberVersionsTest, AMemberStopsWhenTheSchemaNoLongerAcceptsIt) {
  auto admin = testing::MigratedAdmin(db_.dsn());
  CreateGroup(*admin);
  const std::string member_dsn = db_.MemberDsn();
  auto c = Start(member_dsn);
  ASSERT_NE(c, nullptr);
  Produce(10);
  ASSERT_TRUE(WaitFor([&] { return handled_ == 10; }, absl::Seconds(20)));
  const int next = kSchemaVersion + 1;
  // What a future `migrate` of a contract migration leaves, and says.
  ExecSql(db_.dsn(),
          absl::StrCat("INSERT INTO sqlgroup.schema_migrations (version, name, "
                       "members_from) VALUES (",
                       next, ", 'future.sql', ", next,
                       "); SELECT pg_notify('sqlgroup', 'schema:", next, "')"));
  ASSERT_TRUE(WaitFor([&] { return c->state() == Consumer::State::kFailed; },
                      absl::Seconds(10)));
  Produce(10);
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(handled_, 10);
  auto again = Consumer::Create(Options(member_dsn));
  ASSERT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(),
              HasSubstr(absl::StrCat("schema is version ", next)));
  EXPECT_THAT(again.status().message(), HasSubstr(kVersion));
}

}  // namespace
}  // namespace sqlgroup
