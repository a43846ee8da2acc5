// Durations as SQL interval literals every supported PostgreSQL accepts.
#include "store/interval.h"

#include <gtest/gtest.h>

namespace sqlgroup::store {
namespace {

TEST(ToInterval, WritesSecondsWithMicrosecondsSoPostgres14TakesLongOnes) {
  EXPECT_EQ(ToInterval(absl::Milliseconds(1500)), "1.500000 seconds");
  EXPECT_EQ(ToInterval(absl::Hours(1)), "3600.000000 seconds");
  EXPECT_EQ(ToInterval(absl::Microseconds(1)), "0.000001 seconds");
  EXPECT_EQ(ToInterval(absl::ZeroDuration()), "0.000000 seconds");
  EXPECT_EQ(ToInterval(-absl::Microseconds(250)), "-0.000250 seconds");
  EXPECT_EQ(ToInterval(absl::Hours(24 * 365)), "31536000.000000 seconds");
}

}  // namespace
}  // namespace sqlgroup::store
