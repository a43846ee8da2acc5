// The private PostgreSQL that integration tests run against: one cluster per
// test binary, a fresh database per test. A cluster that cannot start fails
// the test; it is never a silent skip.
#ifndef SQLGROUP_TESTS_SUPPORT_PG_FIXTURE_H_
#define SQLGROUP_TESTS_SUPPORT_PG_FIXTURE_H_

#include <memory>
#include <string>

#include "sqlgroup/admin.h"
#include "sqlgroup/private_postgres.h"

namespace sqlgroup::testing {

// The cluster shared by every test in this binary, started on first use
// (durable = false) and stopped at exit. Aborts the binary with a clear
// message when it cannot start.
PrivatePostgres& SharedPostgres();

// A fresh, empty database on SharedPostgres(), dropped (WITH (FORCE)) when
// this object goes out of scope.
class TestDatabase {
 public:
  TestDatabase();
  ~TestDatabase();
  TestDatabase(const TestDatabase&) = delete;
  TestDatabase& operator=(const TestDatabase&) = delete;

  const std::string& name() const { return name_; }
  const std::string& dsn() const { return dsn_; }

 private:
  std::string name_;
  std::string dsn_;
};

// An Admin on `dsn` after Migrate(); fails the test (and returns null) when
// either step fails.
std::unique_ptr<Admin> MigratedAdmin(const std::string& dsn);

}  // namespace sqlgroup::testing

#endif  // SQLGROUP_TESTS_SUPPORT_PG_FIXTURE_H_
