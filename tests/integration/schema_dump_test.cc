// sql/schema.sql is the schema the migrations produce: a fresh database on
// a private PostgreSQL 15, migrated by the library (as `sqlgroup migrate`
// does), dumped by scripts/dump_schema.sh --dsn (pg_dump, normalized),
// equals the file byte for byte. On a difference the test prints the diff
// and the command that regenerates the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "sqlgroup/admin.h"
#include "sqlgroup/private_postgres.h"
#include "support/subprocess.h"

namespace sqlgroup {
namespace {

using testing::RunProcess;
using testing::SourceDir;

// sql/schema.sql is PostgreSQL 15's dump whatever SQLGROUP_PG_BIN says (the
// version matrix runs other majors): dumps of other majors differ in form.
constexpr char kPg15Bin[] = "/usr/lib/postgresql/15/bin";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(SchemaDump, SqlSchemaSqlIsWhatTheMigrationsProduce) {
  auto pg = PrivatePostgres::Start({.bin_dir = kPg15Bin, .durable = false});
  // A missing server is a failure, never a skip.
  ASSERT_TRUE(pg.ok()) << pg.status();
  ASSERT_TRUE((*pg)->CreateDatabase("schema_dump").ok());
  const std::string dsn = (*pg)->Dsn("schema_dump");
  {
    auto admin = Admin::Connect({.dsn = dsn});
    ASSERT_TRUE(admin.ok()) << admin.status();
    auto migrated = (*admin)->Migrate();
    ASSERT_TRUE(migrated.ok()) << migrated.status();
  }

  const std::string committed_path = SourceDir() + "/sql/schema.sql";
  const std::string dumped_path =
      std::filesystem::temp_directory_path() /
      ("sqlgroup_schema_dump_" + std::to_string(getpid()) + ".sql");
  const testing::ProcessResult dump =
      RunProcess({"/bin/bash", SourceDir() + "/scripts/dump_schema.sh", "--dsn",
                  dsn, "--pg_bin", kPg15Bin, "--out", dumped_path});
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  const std::string dumped = ReadFile(dumped_path);
  ASSERT_FALSE(dumped.empty());
  ASSERT_NE(dumped.find("CREATE TABLE sqlgroup.items"), std::string::npos)
      << dumped;

  const std::string committed = ReadFile(committed_path);
  if (committed != dumped) {
    const testing::ProcessResult diff =
        RunProcess({"/usr/bin/diff", "-u", committed_path, dumped_path});
    ADD_FAILURE() << "sql/schema.sql differs from the schema the migrations "
                     "in sql/ produce (- the file, + the migrations):\n"
                  << diff.out
                  << "\nRegenerate it with: scripts/dump_schema.sh "
                     "(after building build/sqlgroup), and commit it with the "
                     "migration that changed it.";
  }
  std::remove(dumped_path.c_str());
}

}  // namespace
}  // namespace sqlgroup
