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
// (durable = false) and stopped at exit. The superuser `postgres` logs in
// without a password (Dsn()); every other role needs its password over TCP
// (scram-sha-256), as on a real server. Aborts the binary with a clear
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
  // As the superuser.
  const std::string& dsn() const { return dsn_; }
  // As kMemberRole, after giving it the member grants of `sqlgroup grant`
  // in this database (Admin::GrantRoles): members in tests run with least
  // privilege, so a statement the grants miss fails a test. Call after
  // migrating; fails the test when granting fails.
  std::string MemberDsn() const;

 private:
  std::string name_;
  std::string dsn_;
};

// The login role of MemberDsn(), created once per cluster, and its
// password.
inline constexpr char kMemberRole[] = "sqlgroup_test_member";
inline constexpr char kMemberPassword[] = "member-pw-8d1e";

// A login role with a random name and password, for the life of this
// object (dropped, best effort, at the end: drop databases it has
// privileges in first, i.e. declare it before them).
class TestRole {
 public:
  TestRole();
  ~TestRole();
  TestRole(const TestRole&) = delete;
  TestRole& operator=(const TestRole&) = delete;

  const std::string& name() const { return name_; }
  const std::string& password() const { return password_; }
  // Keyword/value DSN of `database` as this role, password included.
  std::string Dsn(const std::string& database) const;
  // The same as a URI: postgresql://name:password@127.0.0.1:port/database.
  std::string Uri(const std::string& database) const;

 private:
  std::string name_;
  std::string password_;
};

// Runs `sql` in `dsn` as one transaction; fails the test on error.
void ExecSql(const std::string& dsn, const std::string& sql);

// An Admin on `dsn` after Migrate(); fails the test (and returns null) when
// either step fails.
std::unique_ptr<Admin> MigratedAdmin(const std::string& dsn);

}  // namespace sqlgroup::testing

#endif  // SQLGROUP_TESTS_SUPPORT_PG_FIXTURE_H_
