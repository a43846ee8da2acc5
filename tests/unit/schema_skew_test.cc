// The version skew rule (schema_skew.h) and the "-- members-from:" lines
// of the migrations (migrations.h), with no database.
#include "schema_skew.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "migrations.h"
#include "sqlgroup/admin.h"

namespace sqlgroup::internal {
namespace {

using ::testing::HasSubstr;

const BinarySchemas kBinary{"0.15.0", 15, 13};

TEST(SchemaSkew, ABinaryServesItsOwnSchemaAndTheOlderOnesItNames) {
  EXPECT_EQ(*CheckSkew({15, 14}, kBinary), Skew::kSame);
  EXPECT_EQ(*CheckSkew({14, 13}, kBinary), Skew::kOlderServed);
  EXPECT_EQ(*CheckSkew({13, 13}, kBinary), Skew::kOlderServed);
}

TEST(SchemaSkew, ASchemaOlderThanServedSaysToMigrate) {
  const auto skew = CheckSkew({12, 12}, kBinary);
  ASSERT_EQ(skew.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(skew.status().message(), HasSubstr("version 12"));
  EXPECT_THAT(skew.status().message(),
              HasSubstr("runs against schemas 13 to 15"));
  EXPECT_THAT(skew.status().message(), HasSubstr("run `sqlgroup migrate`"));
}

TEST(SchemaSkew, NoSchemaSaysToMigrateFirst) {
  const auto skew = CheckSkew({0, 0}, kBinary);
  ASSERT_EQ(skew.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(skew.status().message(), HasSubstr("no sqlgroup schema"));
}

TEST(SchemaSkew, ANewerSchemaServesOnlyWhenItAcceptsTheBinary) {
  // An expand migration 16 (members from 15) accepts this binary...
  EXPECT_EQ(*CheckSkew({16, 15}, kBinary), Skew::kNewerAccepted);
  EXPECT_EQ(*CheckSkew({17, 15}, kBinary), Skew::kNewerAccepted);
  // ...a contract migration (members from 16) does not, and says so with
  // both versions and what to run.
  const auto skew = CheckSkew({16, 16}, kBinary);
  ASSERT_EQ(skew.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(skew.status().message(), HasSubstr("schema is version 16"));
  EXPECT_THAT(skew.status().message(),
              HasSubstr("only members that know schema 16 or newer"));
  EXPECT_THAT(skew.status().message(), HasSubstr("sqlgroup (0.15.0)"));
  EXPECT_THAT(skew.status().message(),
              HasSubstr("run a sqlgroup release that knows schema 16"));
}

TEST(SchemaSkew, TheNoteSaysWhichFeaturesAreOff) {
  EXPECT_EQ(SkewNote(Skew::kSame, {15, 14}, kBinary), "");
  EXPECT_THAT(SkewNote(Skew::kOlderServed, {13, 13}, kBinary),
              HasSubstr("versions are not recorded before schema 14"));
  EXPECT_THAT(SkewNote(Skew::kOlderServed, {14, 13}, kBinary),
              HasSubstr("features of the newer schemas off"));
  EXPECT_THAT(SkewNote(Skew::kNewerAccepted, {16, 15}, kBinary),
              HasSubstr("newer than this sqlgroup's"));
}

// Every pair of (schema, members_from) and binary: a binary runs exactly
// where the rule of docs/UPGRADING.md says.
TEST(SchemaSkew, TheRuleHoldsOverEveryPair) {
  for (int version = 1; version <= 20; ++version) {
    for (int from = 1; from <= version; ++from) {
      for (int known = 1; known <= 20; ++known) {
        for (int oldest = 1; oldest <= known; ++oldest) {
          const auto skew = CheckSkew({version, from}, {"0.x", known, oldest});
          const bool runs = (version >= oldest && version <= known) ||
                            (version > known && from <= known);
          ASSERT_EQ(skew.ok(), runs)
              << version << " " << from << " " << known << " " << oldest;
        }
      }
    }
  }
}

TEST(SchemaSkew, TheHeaderMatchesTheMigrationsAndTheProject) {
  EXPECT_EQ(kSchemaVersion, LatestKnownVersion());
  EXPECT_EQ(SchemaVersionKnown(), kSchemaVersion);
  EXPECT_EQ(std::string(kVersion), SQLGROUP_PROJECT_VERSION);
  // Before 1.0 the minor version is the schema.
  EXPECT_EQ(std::string(kVersion).rfind(
                "0." + std::to_string(kSchemaVersion) + ".", 0),
            0u);
  EXPECT_LE(kOldestServedSchema, kSchemaVersion);
  // The oldest schema served is one the newest accepts members of: a new
  // release can be rolled out on the schema before it.
  auto migrations = ParseMigrations(EmbeddedMigrations());
  ASSERT_TRUE(migrations.ok()) << migrations.status();
  EXPECT_LE(migrations->back().members_from, kSchemaVersion);
}

TEST(Migrations, EachFromSchema14SaysWhichMembersItAccepts) {
  auto migrations = ParseMigrations(EmbeddedMigrations());
  ASSERT_TRUE(migrations.ok()) << migrations.status();
  int previous = 0;
  for (const Migration& m : *migrations) {
    if (m.version < kVersionsRecordedFrom) {
      EXPECT_EQ(m.members_from, m.version) << m.name;
    }
    EXPECT_GE(m.members_from, previous) << m.name;
    EXPECT_LE(m.members_from, m.version) << m.name;
    previous = m.members_from;
  }
  // 14 added versions (expand), 15 requires them (contract).
  EXPECT_EQ((*migrations)[13].members_from, 13);
  EXPECT_EQ((*migrations)[14].members_from, 14);
}

std::vector<MigrationSource> UpTo13() {
  std::vector<MigrationSource> out;
  for (int v = 1; v <= 13; ++v) {
    char name[32];
    std::snprintf(name, sizeof name, "%03d_m.sql", v);
    out.push_back({name, "SELECT 1;"});
  }
  return out;
}

TEST(Migrations, AMigrationFromSchema14WithoutTheLineIsRefused) {
  auto sources = UpTo13();
  sources.push_back({"014_x.sql", "SELECT 1;"});
  const auto parsed = ParseMigrations(sources);
  ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("014_x.sql"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("-- members-from: N"));
}

TEST(Migrations, TheLineMustNotGoBackNorAhead) {
  for (const char* line : {"-- members-from: 15\n", "-- members-from: 12\n",
                           "-- members-from: soon\n"}) {
    auto sources = UpTo13();
    sources.push_back({"014_x.sql", std::string("-- x\n") + line});
    const auto parsed = ParseMigrations(sources);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << line;
  }
  auto sources = UpTo13();
  sources.push_back({"014_x.sql", "-- x\n-- members-from: 14\nSELECT 1;"});
  const auto parsed = ParseMigrations(sources);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->back().members_from, 14);
}

}  // namespace
}  // namespace sqlgroup::internal
