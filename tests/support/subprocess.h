// Runs a program to completion and captures what it printed: for tests of
// the `sqlgroup` command line.
#ifndef SQLGROUP_TESTS_SUPPORT_SUBPROCESS_H_
#define SQLGROUP_TESTS_SUPPORT_SUBPROCESS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace sqlgroup::testing {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  bool timed_out = false;
  std::string out;
  std::string err;
  absl::Duration elapsed;
};

// Runs `argv` (argv[0] a path) with extra environment variables, killing it
// after `timeout`.
ProcessResult RunProcess(
    const std::vector<std::string>& argv,
    const std::vector<std::pair<std::string, std::string>>& env = {},
    absl::Duration timeout = absl::Seconds(60));

// The built `sqlgroup` binary ($SQLGROUP_CLI, set by ctest).
std::string CliPath();

// The source tree ($SQLGROUP_SOURCE_DIR, set by ctest): for test scripts
// under tests/support.
std::string SourceDir();

// RunProcess of the CLI with `args`.
ProcessResult RunCli(
    const std::vector<std::string>& args,
    const std::vector<std::pair<std::string, std::string>>& env = {},
    absl::Duration timeout = absl::Seconds(60));

}  // namespace sqlgroup::testing

namespace sqlgroup::testing {

// A long-running child (e.g. `sqlgroup consume`) with its output in a log
// file; killed with SIGKILL if still running when destroyed.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv,
               const std::string& log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  void Signal(int sig);
  // Waits for exit; the exit code, or -1 (signal or timeout, then killed).
  int Wait(absl::Duration timeout);
  bool running() const { return pid_ > 0; }
  std::string Log() const;

 private:
  int pid_ = -1;
  std::string log_path_;
};

}  // namespace sqlgroup::testing
#endif  // SQLGROUP_TESTS_SUPPORT_SUBPROCESS_H_
