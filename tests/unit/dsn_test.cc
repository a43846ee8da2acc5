#include "dsn.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace sqlgroup {
namespace {

TEST(Dsn, PasswordsAreMaskedInEveryForm) {
  const std::pair<const char*, const char*> cases[] = {
      {"host=h password=secret dbname=d", "host=h password=*** dbname=d"},
      {"host=h password = 'se cr\\'et' dbname=d",
       "host=h password = *** dbname=d"},
      {"host=h PASSWORD=secret", "host=h PASSWORD=***"},
      {"postgresql://user:secret@h:5432/d", "postgresql://user:***@h:5432/d"},
      {"postgres://user:secret@h/d?sslmode=require&password=x",
       "postgres://user:***@h/d?sslmode=require&password=***"},
      {"postgresql://user@h/d", "postgresql://user@h/d"},
      {"host=h dbname=d", "host=h dbname=d"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(MaskDsn(in), want) << in;
}

TEST(Dsn, ConnectTimeoutIsAddedOnlyWhenMissing) {
  EXPECT_EQ(WithConnectTimeout("host=h", 5), "host=h connect_timeout=5");
  EXPECT_EQ(WithConnectTimeout("", 5), "connect_timeout=5");
  EXPECT_EQ(WithConnectTimeout("postgresql://h/d", 3),
            "postgresql://h/d?connect_timeout=3");
  EXPECT_EQ(WithConnectTimeout("postgresql://h/d?sslmode=disable", 3),
            "postgresql://h/d?sslmode=disable&connect_timeout=3");
  EXPECT_EQ(WithConnectTimeout("host=h connect_timeout=9", 5),
            "host=h connect_timeout=9");
}

TEST(Dsn, FlagWinsOverEnvironmentWhichWinsOverLibpqDefaults) {
  setenv("SQLGROUP_DSN", "host=from-env", 1);
  EXPECT_EQ(ResolveDsn("host=from-flag"), "host=from-flag");
  EXPECT_EQ(ResolveDsn(""), "host=from-env");
  unsetenv("SQLGROUP_DSN");
  EXPECT_EQ(ResolveDsn(""), "");
}

}  // namespace
}  // namespace sqlgroup
