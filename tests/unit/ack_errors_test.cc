// How an exception of a statement that settles items becomes a status
// (store/item_acks.h's codes), from pqxx's own exception types: no
// database needed.
#include <gtest/gtest.h>

#include <pqxx/except>

#include "sqlgroup/item.h"
#include "store/pg_item_acks.h"

namespace sqlgroup::store {
namespace {

template <typename E>
absl::Status Mapped(const E& e, const std::string& function = "") {
  try {
    throw e;
  } catch (...) {
    return AckErrorOfCurrentException(function);
  }
}

pqxx::sql_error Sql(const char* state) {
  return pqxx::sql_error("ERROR: something", "DELETE ...", state);
}

TEST(AckErrors, ABrokenConnectionIsUnavailableAndACommitInDoubtUnknown) {
  EXPECT_TRUE(absl::IsUnavailable(Mapped(pqxx::broken_connection("gone"))));
  EXPECT_TRUE(absl::IsUnknown(Mapped(pqxx::in_doubt_error("lost at COMMIT"))));
}

TEST(AckErrors, ErrorsThatSayNothingOfTheItemsAreConflicts) {
  EXPECT_TRUE(absl::IsAborted(Mapped(pqxx::serialization_failure("40001"))));
  EXPECT_TRUE(absl::IsAborted(Mapped(pqxx::deadlock_detected("40P01"))));
  for (const char* state : {"40001", "40P01", "55P03", "53100", "57P01"}) {
    EXPECT_TRUE(absl::IsAborted(Mapped(Sql(state)))) << state;
  }
}

// An ack's own error (a missing grant, a constraint, a broken schema) is
// the statement's: never read as a broken connection or a conflict, which
// would drop a healthy connection or retry without counting an attempt.
TEST(AckErrors, AnAcksOwnErrorIsNeitherABrokenConnectionNorAConflict) {
  for (const char* state : {"42501", "23503", "42P01", "08006", "25P03"}) {
    const absl::Status s = Mapped(Sql(state));
    EXPECT_FALSE(s.ok()) << state;
    EXPECT_FALSE(absl::IsUnavailable(s) || absl::IsUnknown(s) ||
                 absl::IsAborted(s))
        << state << ": " << s;
  }
}

TEST(AckErrors, ASqlFunctionsErrorIsItsVerdict) {
  const absl::Status canceled = Mapped(Sql("57014"), "app.handle");
  EXPECT_TRUE(absl::IsDeadlineExceeded(canceled)) << canceled;
  EXPECT_NE(canceled.message().find("sql_function app.handle"),
            std::string::npos);
  EXPECT_TRUE(IsDeadLetterVerdict(Mapped(Sql("SGDLQ"), "app.handle")));
  EXPECT_FALSE(Mapped(Sql("P0001"), "app.handle").ok());
  // A conflict stays a conflict, the function's or not.
  EXPECT_TRUE(absl::IsAborted(Mapped(Sql("40P01"), "app.handle")));
}

}  // namespace
}  // namespace sqlgroup::store
