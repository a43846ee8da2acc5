// What a database holds, as text, to show that a failed command changed
// nothing: compare a snapshot taken before with one taken after.
#ifndef SQLGROUP_TESTS_SUPPORT_DB_SNAPSHOT_H_
#define SQLGROUP_TESTS_SUPPORT_DB_SNAPSHOT_H_

#include <string>

namespace sqlgroup::testing {

// Every schema, table and column outside the system schemas, every row of
// every such table (sorted), and every sequence's position. Fails the test
// when the database cannot be read.
std::string DatabaseSnapshot(const std::string& dsn);

}  // namespace sqlgroup::testing

#endif  // SQLGROUP_TESTS_SUPPORT_DB_SNAPSHOT_H_
