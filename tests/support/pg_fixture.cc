#include "support/pg_fixture.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <future>
#include <memory>
#include <thread>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"

namespace sqlgroup::testing {

namespace {

absl::StatusOr<std::unique_ptr<PrivatePostgres>> StartShared() {
  PrivatePostgresOptions options;
  options.durable = false;
  options.hba_rules = {"host all postgres 127.0.0.1/32 trust",
                       "host all all 127.0.0.1/32 scram-sha-256"};
  if (gettid() == getpid()) return PrivatePostgres::Start(std::move(options));
  // The parent-death signal fires when the *thread* that started the server
  // exits, so a test's worker thread must not own it: start it on a thread
  // parked for the rest of the process.
  std::promise<absl::StatusOr<std::unique_ptr<PrivatePostgres>>> started;
  std::thread([&started, options = std::move(options)]() mutable {
    started.set_value(PrivatePostgres::Start(std::move(options)));
    for (;;) pause();
  }).detach();
  return started.get_future().get();
}

}  // namespace

PrivatePostgres& SharedPostgres() {
  // Destroyed (server stopped, directory removed) at process exit.
  static const std::unique_ptr<PrivatePostgres> pg = [] {
    absl::StatusOr<std::unique_ptr<PrivatePostgres>> started = StartShared();
    if (!started.ok()) {
      // A test without its database must fail loudly, never skip.
      std::fprintf(stderr, "FATAL: cannot start the private PostgreSQL: %s\n",
                   started.status().ToString().c_str());
      std::abort();
    }
    return *std::move(started);
  }();
  return *pg;
}

TestDatabase::TestDatabase() {
  absl::BitGen gen;
  name_ = absl::StrFormat("t_%016x", absl::Uniform<uint64_t>(gen));
  absl::Status status = SharedPostgres().CreateDatabase(name_);
  if (!status.ok()) ADD_FAILURE() << "creating test database: " << status;
  dsn_ = SharedPostgres().Dsn(name_);
}

TestDatabase::~TestDatabase() {
  try {
    pqxx::connection conn(SharedPostgres().Dsn("postgres"));
    pqxx::nontransaction tx(conn);
    // FORCE: a test may leave connections open.
    tx.exec0(absl::StrCat("DROP DATABASE IF EXISTS ", tx.quote_name(name_),
                          " WITH (FORCE)"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: dropping test database %s: %s\n",
                 name_.c_str(), e.what());
  }
}

namespace {

std::string RandomHex(absl::BitGen& gen) {
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(gen));
}

}  // namespace

void ExecSql(const std::string& dsn, const std::string& sql) {
  try {
    pqxx::connection conn(dsn);
    pqxx::work tx(conn);
    tx.exec(sql);
    tx.commit();
  } catch (const std::exception& e) {
    ADD_FAILURE() << sql << ": " << e.what();
  }
}

std::string TestDatabase::MemberDsn() const {
  // Roles belong to the cluster: one member role serves every database.
  static const bool created = [] {
    ExecSql(SharedPostgres().Dsn(),
            absl::StrCat("CREATE ROLE ", kMemberRole, " LOGIN PASSWORD '",
                         kMemberPassword, "'"));
    return true;
  }();
  (void)created;
  auto admin = Admin::Connect({.dsn = dsn_});
  EXPECT_TRUE(admin.ok()) << admin.status();
  if (admin.ok()) {
    const absl::Status s = (*admin)->GrantRoles({.member_role = kMemberRole});
    EXPECT_TRUE(s.ok()) << s;
  }
  return absl::StrCat("host=127.0.0.1 port=", SharedPostgres().port(),
                      " dbname=", name_, " user=", kMemberRole,
                      " password=", kMemberPassword);
}

TestRole::TestRole() {
  absl::BitGen gen;
  name_ = absl::StrCat("r_", RandomHex(gen));
  password_ = absl::StrCat("pw-", RandomHex(gen));
  ExecSql(
      SharedPostgres().Dsn(),
      absl::StrCat("CREATE ROLE ", name_, " LOGIN PASSWORD '", password_, "'"));
}

TestRole::~TestRole() {
  try {
    pqxx::connection conn(SharedPostgres().Dsn());
    pqxx::nontransaction tx(conn);
    tx.exec0(absl::StrCat("DROP ROLE IF EXISTS ", name_));
  } catch (const std::exception&) {
    // Still holds privileges somewhere; the cluster goes away anyway.
  }
}

std::string TestRole::Dsn(const std::string& database) const {
  return absl::StrCat("host=127.0.0.1 port=", SharedPostgres().port(),
                      " dbname=", database, " user=", name_,
                      " password=", password_);
}

std::string TestRole::Uri(const std::string& database) const {
  return absl::StrCat("postgresql://", name_, ":", password_,
                      "@127.0.0.1:", SharedPostgres().port(), "/", database);
}

std::unique_ptr<Admin> MigratedAdmin(const std::string& dsn) {
  auto admin = Admin::Connect({.dsn = dsn});
  EXPECT_TRUE(admin.ok()) << admin.status();
  if (!admin.ok()) return nullptr;
  const auto migrated = (*admin)->Migrate();
  EXPECT_TRUE(migrated.ok()) << migrated.status();
  return migrated.ok() ? std::move(*admin) : nullptr;
}

}  // namespace sqlgroup::testing
