// store::SqlStateOf and the classification built on it: libpqxx 6.4
// throws some error classes without their SQLSTATE, and a missing
// privilege must still read as one (a member that retried "permission
// denied" for ever, issue 37).
#include <gtest/gtest.h>

#include <pqxx/except>

#include "absl/status/status.h"
#include "store/errors.h"

namespace sqlgroup::store {
namespace {

absl::Status StatusOf(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (...) {
    return StatusFromCurrentException("register session");
  }
}

TEST(SqlStateOf, AStateLibpqxxLeftOutIsTakenFromTheExceptionType) {
  EXPECT_EQ(SqlStateOf(pqxx::insufficient_privilege("permission denied")),
            "42501");
  EXPECT_EQ(SqlStateOf(pqxx::undefined_table("no such table")), "42P01");
  EXPECT_EQ(SqlStateOf(pqxx::undefined_function("no such function")), "42883");
  EXPECT_EQ(SqlStateOf(pqxx::disk_full("disk full")), "53100");
  EXPECT_EQ(SqlStateOf(pqxx::unique_violation("duplicate")), "23505");
  EXPECT_EQ(SqlStateOf(pqxx::sql_error("something")), "");
  // One libpqxx did give is kept.
  EXPECT_EQ(SqlStateOf(pqxx::sql_error("x", "SELECT 1", "XX000")), "XX000");
}

TEST(SqlStateOf, AMissingPrivilegeIsPermissionDeniedAndSaysWhatToRun) {
  const absl::Status s = StatusOf(std::make_exception_ptr(
      pqxx::insufficient_privilege("ERROR:  permission denied for table "
                                   "sessions\n")));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("SQLSTATE 42501"), absl::string_view::npos);
  EXPECT_NE(s.message().find("sqlgroup grant"), absl::string_view::npos);
}

TEST(SqlErrorVerdict, AMissingTableOrGrantIsAnOutageNotTheItems) {
  EXPECT_EQ(SqlErrorVerdict(pqxx::undefined_table("no table"), "sql_function f")
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      SqlErrorVerdict(pqxx::data_exception("bad number"), "sql_function f")
          .code(),
      absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace sqlgroup::store
