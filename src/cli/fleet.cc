#include "cli/fleet.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace sqlgroup::cli {

Fleet::Fleet(std::vector<std::string> args, std::string log_dir)
    : args_(std::move(args)), log_dir_(std::move(log_dir)) {}

Fleet::~Fleet() {
  for (const auto& [name, pid] : pids_) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
}

absl::Status Fleet::Start(const std::string& instance) {
  std::vector<std::string> argv = {"/proc/self/exe", "consume"};
  argv.insert(argv.end(), args_.begin(), args_.end());
  argv.push_back("--instance=" + instance);
  const std::string log = absl::StrCat(log_dir_, "/", instance, ".log");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    // The demo blocks SIGINT/SIGTERM to take them synchronously; members
    // must start with them deliverable.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  pids_[instance] = pid;
  return absl::OkStatus();
}

absl::Status Fleet::Kill(const std::string& instance) {
  auto it = pids_.find(instance);
  if (it == pids_.end()) return absl::NotFoundError(instance);
  kill(it->second, SIGKILL);
  waitpid(it->second, nullptr, 0);
  pids_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<int> Fleet::Stop(const std::string& instance,
                                absl::Duration timeout) {
  auto it = pids_.find(instance);
  if (it == pids_.end()) return absl::NotFoundError(instance);
  const pid_t pid = it->second;
  pids_.erase(it);
  kill(pid, SIGTERM);
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return absl::DeadlineExceededError(
          absl::StrCat(instance, " did not stop within ",
                       absl::FormatDuration(timeout), "; killed"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> Fleet::running() const {
  std::vector<std::string> names;
  for (const auto& [name, pid] : pids_) names.push_back(name);
  return names;
}

}  // namespace sqlgroup::cli
