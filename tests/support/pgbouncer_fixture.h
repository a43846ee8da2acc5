// A private PgBouncer in front of SharedPostgres(), started the way the
// tests start PostgreSQL (tests/support/pgbouncer.py: Debian's pgbouncer,
// as the `postgres` OS user, on a free loopback port). One that cannot
// start fails the test; it is never a silent skip.
#ifndef SQLGROUP_TESTS_SUPPORT_PGBOUNCER_FIXTURE_H_
#define SQLGROUP_TESTS_SUPPORT_PGBOUNCER_FIXTURE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "support/subprocess.h"

namespace sqlgroup::testing {

class TestPgBouncer {
 public:
  // `mode`: "transaction" or "session"; `pool_size`: server connections
  // for the whole database. Clients may log in as postgres and as
  // kMemberRole, and as each of `users` (name, password).
  TestPgBouncer(const std::string& mode, int pool_size,
                std::vector<std::pair<std::string, std::string>> users = {});
  ~TestPgBouncer();
  TestPgBouncer(const TestPgBouncer&) = delete;
  TestPgBouncer& operator=(const TestPgBouncer&) = delete;

  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  // `direct_dsn` (a keyword/value DSN to SharedPostgres() on 127.0.0.1),
  // through PgBouncer instead.
  std::string Via(const std::string& direct_dsn) const;
  // Stops PgBouncer, cutting every client and server connection, and
  // starts it again on the same port; false if it did not come back.
  bool Restart();

 private:
  std::string log_path_;
  std::unique_ptr<ChildProcess> child_;
  int port_ = -1;
};

}  // namespace sqlgroup::testing

#endif  // SQLGROUP_TESTS_SUPPORT_PGBOUNCER_FIXTURE_H_
