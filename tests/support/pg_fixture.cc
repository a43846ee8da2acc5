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

std::unique_ptr<Admin> MigratedAdmin(const std::string& dsn) {
  auto admin = Admin::Connect({.dsn = dsn});
  EXPECT_TRUE(admin.ok()) << admin.status();
  if (!admin.ok()) return nullptr;
  const auto migrated = (*admin)->Migrate();
  EXPECT_TRUE(migrated.ok()) << migrated.status();
  return migrated.ok() ? std::move(*admin) : nullptr;
}

}  // namespace sqlgroup::testing
