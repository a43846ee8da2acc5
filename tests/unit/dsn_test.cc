#include "dsn.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

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
      {"host=h password=se\\ cret dbname=d", "host=h password=*** dbname=d"},
      {"host=h sslpassword=secret", "host=h sslpassword=***"},
      {"postgresql://u:se/cr@et@h/d", "postgresql://u:***@h/d"},
      {"postgresql://u:secret@h1:5432,h2:5433/d?target_session_attrs=any",
       "postgresql://u:***@h1:5432,h2:5433/d?target_session_attrs=any"},
      {"postgresql://u@h/d?sslpassword=secret",
       "postgresql://u@h/d?sslpassword=***"},
      {"postgresql://h:5432/d", "postgresql://h:5432/d"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(MaskDsn(in), want) << in;
}

TEST(Dsn, TheMaskIsExactOnlyWhenLibpqReadsThePasswordsItHides) {
  const std::pair<const char*, bool> cases[] = {
      {"host=h password=secret", true},
      {"host=h password='se cret'", true},
      {"host=h password=se\\ cret", true},
      {"postgresql://u:se%2Fcret@h/d", true},
      {"postgresql://u:secret@h/d?password=secret", false},  // libpq: one
      {"host=h dbname=d", true},
      {"host=h dbname", true},  // malformed, but no password to leak
      {"", true},
      // libpq reads these differently from how they look.
      {"host=h password=se cret", false},
      {"postgresql://u:se/cret@h/d", false},
      {"postgresql://u:se%zzcret@h/d", false},
      {"host=h password='secret", false},
  };
  for (const auto& [dsn, exact] : cases) {
    EXPECT_EQ(MaskIsExact(dsn), exact) << dsn;
  }
}

TEST(Dsn, RedactingRemovesEveryPasswordFromAMessage) {
  EXPECT_EQ(RedactPasswords("bad token \"se%zzcret\" and secret",
                            "postgresql://u:se%zzcret@h/d"),
            "bad token \"***\" and secret");
  EXPECT_EQ(RedactPasswords("x hunter2 y hunter2", "host=h password=hunter2"),
            "x *** y ***");
  EXPECT_EQ(RedactPasswords("nothing here", "host=h"), "nothing here");
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

TEST(Dsn, ParametersAreQuotedOrEncodedAsTheFormNeeds) {
  EXPECT_EQ(WithParameter("host=h", "application_name", "sqlgroup-worker-1"),
            "host=h application_name=sqlgroup-worker-1");
  EXPECT_EQ(WithParameter("host=h", "application_name", "it's a b\\c"),
            "host=h application_name='it\\'s a b\\\\c'");
  EXPECT_EQ(WithParameter("postgresql://h/d", "application_name", "a b/c"),
            "postgresql://h/d?application_name=a%20b%2Fc");
  EXPECT_EQ(
      WithParameter("host=h application_name=mine", "application_name", "x"),
      "host=h application_name=mine");
}

TEST(Dsn, FlagWinsOverEnvironmentWhichWinsOverLibpqDefaults) {
  setenv("SQLGROUP_DSN", "host=from-env", 1);
  EXPECT_EQ(ResolveDsn("host=from-flag"), "host=from-flag");
  EXPECT_EQ(ResolveDsn(""), "host=from-env");
  unsetenv("SQLGROUP_DSN");
  EXPECT_EQ(ResolveDsn(""), "");
}

TEST(Dsn, TheRoleIsTheDsnsUserElsePgUserElseTheOsUser) {
  EXPECT_EQ(RoleOfDsn("host=db user=alice password=x"), "alice");
  EXPECT_EQ(RoleOfDsn("postgresql://bob:secret@db:5432/app"), "bob");
  const char* saved = std::getenv("PGUSER");
  const std::string before = saved ? saved : "";
  setenv("PGUSER", "carol", 1);
  EXPECT_EQ(RoleOfDsn("host=db"), "carol");
  unsetenv("PGUSER");
  const passwd* pw = getpwuid(geteuid());
  ASSERT_NE(pw, nullptr);
  EXPECT_EQ(RoleOfDsn(""), pw->pw_name);
  if (saved) setenv("PGUSER", before.c_str(), 1);
}

}  // namespace
}  // namespace sqlgroup
