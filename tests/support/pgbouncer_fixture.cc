#include "support/pgbouncer_fixture.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/pg_fixture.h"

namespace sqlgroup::testing {
namespace {

int Count(const std::string& text, const std::string& word) {
  int n = 0;
  for (size_t at = text.find(word); at != std::string::npos;
       at = text.find(word, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace

TestPgBouncer::TestPgBouncer(
    const std::string& mode, int pool_size,
    std::vector<std::pair<std::string, std::string>> users) {
  static int made = 0;
  log_path_ = absl::StrCat(::testing::TempDir(), "pgbouncer-", getpid(), "-",
                           ++made, ".log");
  std::remove(log_path_.c_str());
  users.emplace_back(kMemberRole, kMemberPassword);
  std::vector<std::string> argv = {
      "/usr/bin/python3",
      absl::StrCat(SourceDir(), "/tests/support/pgbouncer.py"),
      "--pg_port",
      absl::StrCat(SharedPostgres().port()),
      "--mode",
      mode,
      "--pool_size",
      absl::StrCat(pool_size)};
  for (const auto& [name, password] : users) {
    argv.push_back("--user");
    argv.push_back(absl::StrCat(name, ":", password));
  }
  child_ = std::make_unique<ChildProcess>(argv, log_path_);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    const std::string log = child_->Log();
    const size_t at = log.find("port: ");
    if (at != std::string::npos) {
      const size_t end = log.find('\n', at);
      if (end != std::string::npos &&
          absl::SimpleAtoi(log.substr(at + 6, end - at - 6), &port_)) {
        return;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ADD_FAILURE() << "PgBouncer did not start: " << child_->Log();
}

TestPgBouncer::~TestPgBouncer() {
  // SIGTERM: the helper stops PgBouncer and removes its directory.
  child_->Signal(SIGTERM);
  child_->Wait(absl::Seconds(15));
}

std::string TestPgBouncer::Via(const std::string& direct_dsn) const {
  return absl::StrReplaceAll(direct_dsn,
                             {{absl::StrCat("port=", SharedPostgres().port()),
                               absl::StrCat("port=", port_)}});
}

bool TestPgBouncer::Restart() {
  const int before = Count(child_->Log(), "restarted");
  child_->Signal(SIGUSR1);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    if (Count(child_->Log(), "restarted") > before) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

}  // namespace sqlgroup::testing
