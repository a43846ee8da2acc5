#include "cli/handlers/line_child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace sqlgroup::cli {
namespace {

constexpr absl::Duration kCutOffCheck = absl::Milliseconds(20);

std::string HowItEnded(int status) {
  if (WIFEXITED(status)) {
    return absl::StrCat("exited with status ", WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return "ended";
}

// Writes what it can of `data` from `*done` on without blocking (the fd
// is non-blocking). False when the child is gone (EPIPE). SIGPIPE is held
// back in this thread while it writes and a pending one is taken, so a
// child that exits never kills the writer, whatever the process does
// with SIGPIPE.
bool WriteSome(int fd, const std::string& data, size_t* done) {
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  bool ok = true;
  while (*done < data.size()) {
    const ssize_t n = write(fd, data.data() + *done, data.size() - *done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      ok = false;
      const timespec now{0, 0};
      sigtimedwait(&pipe_only, nullptr, &now);  // the EPIPE's SIGPIPE
      break;
    }
    *done += static_cast<size_t>(n);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> SplitCommandLine(
    const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote == '\'') {
      if (c == '\'') {
        quote = 0;
      } else {
        word += c;
      }
    } else if (quote == '"') {
      if (c == '"') {
        quote = 0;
      } else if (c == '\\' && i + 1 < text.size() &&
                 std::strchr("\"\\$`", text[i + 1])) {
        word += text[++i];
      } else {
        word += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      word += text[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (quote != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the command has an unterminated ", std::string(1, quote), " quote"));
  }
  if (in_word) words.push_back(std::move(word));
  if (words.empty()) return absl::InvalidArgumentError("the command is empty");
  return words;
}

absl::StatusOr<std::string> FindProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (access(program.c_str(), X_OK) == 0) return program;
    return absl::NotFoundError(absl::StrCat(
        program, " is not an executable file (", std::strerror(errno), ")"));
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate =
        absl::StrCat(dir.empty() ? "." : std::string(dir), "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat("no program named ", program, " in $PATH"));
}

absl::StatusOr<std::unique_ptr<LineChild>> LineChild::Start(
    const std::vector<std::string>& argv) {
  auto path = FindProgram(argv.at(0));
  if (!path.ok()) return absl::UnavailableError(path.status().message());
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot make a pipe: ", std::strerror(errno)));
  }
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    const int e = errno;
    close(to_child[0]);
    close(to_child[1]);
    return absl::UnavailableError(
        absl::StrCat("cannot make a pipe: ", std::strerror(e)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The CLI blocks the stop signals in every thread and ignores SIGPIPE;
  // the child must get neither.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, path->c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(to_child[0]);
  close(from_child[1]);
  if (rc != 0) {
    close(to_child[1]);
    close(from_child[0]);
    return absl::UnavailableError(
        absl::StrCat("cannot start ", *path, ": ", std::strerror(rc)));
  }
  // The write end never blocks: Exchange waits for it within its deadline.
  fcntl(to_child[1], F_SETFL, fcntl(to_child[1], F_GETFL) | O_NONBLOCK);
  return std::unique_ptr<LineChild>(
      new LineChild(pid, to_child[1], from_child[0]));
}

LineChild::~LineChild() {
  if (pid_ > 0) Reap(absl::Seconds(2));
}

std::string LineChild::Reap(absl::Duration grace) {
  if (in_ >= 0) close(in_);
  in_ = -1;
  std::string how = "ended";
  if (pid_ > 0) {
    const absl::Time deadline = absl::Now() + grace;
    int status = 0;
    pid_t done = 0;
    while ((done = waitpid(pid_, &status, WNOHANG)) == 0 &&
           absl::Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (done == 0) {
      kill(-pid_, SIGKILL);  // its own process group: its children too
      kill(pid_, SIGKILL);
      while ((done = waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
      }
      how = "was killed";
    } else if (done > 0) {
      how = HowItEnded(status);
    }
    pid_ = -1;
  }
  if (out_ >= 0) close(out_);
  out_ = -1;
  return how;
}

absl::Status LineChild::StillRunningAfter(absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  while (pid_ > 0) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      pid_ = -1;
      Reap(absl::ZeroDuration());  // closes the pipes
      return absl::FailedPreconditionError(HowItEnded(status));
    }
    if (absl::Now() >= deadline) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::FailedPreconditionError("ended");
}

bool LineChild::HasUnreadOutput() {
  if (!alive()) return false;
  return !buffered_.empty() || Readable();
}

bool LineChild::Readable() const {
  pollfd p{out_, POLLIN, 0};
  return out_ >= 0 && poll(&p, 1, 0) > 0;
}

absl::StatusOr<std::string> LineChild::Exchange(const std::string& line,
                                                absl::Duration timeout,
                                                const std::atomic<bool>* cut) {
  if (!alive()) return absl::UnavailableError("the process is not running");
  // Written and read in one loop, within one deadline: an item line can be
  // far bigger than a pipe, and a child that writes while it reads must
  // not deadlock with a writer that only writes.
  const std::string out = line + "\n";
  size_t sent = 0;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (sent == out.size()) {
      const size_t newline = buffered_.find('\n');
      if (newline != std::string::npos) {
        std::string reply = buffered_.substr(0, newline);
        buffered_.erase(0, newline + 1);
        if (!reply.empty() && reply.back() == '\r') reply.pop_back();
        return reply;
      }
    }
    // Cut off, unless the reply came meanwhile: it is read first (below,
    // when poll says so), and the work it reports is not thrown away.
    if (cut != nullptr && cut->load() && !Readable()) {
      Reap(absl::ZeroDuration());
      return absl::CancelledError(
          "cut off before it replied; the process was killed and is "
          "restarted for the next item");
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      Reap(absl::ZeroDuration());
      return absl::DeadlineExceededError(absl::StrCat(
          sent == out.size() ? "no reply" : "the item was not read", " within ",
          absl::FormatDuration(timeout),
          " (--handler_timeout); the process was killed and is restarted "
          "for the next item"));
    }
    pollfd p[2] = {{out_, POLLIN, 0}, {in_, POLLOUT, 0}};
    // A call that can be cut off looks at `cut` at least every 20 ms.
    const absl::Duration wait =
        cut != nullptr ? std::min(left, kCutOffCheck) : left;
    const int ready =
        poll(p, sent == out.size() ? 1 : 2,
             static_cast<int>(absl::ToInt64Milliseconds(wait)) + 1);
    if (ready < 0 && errno != EINTR) {
      const std::string why = std::strerror(errno);
      Reap(absl::ZeroDuration());
      return absl::UnavailableError(
          absl::StrCat("waiting for its reply failed: ", why));
    }
    if (ready <= 0) continue;
    if (sent < out.size() && (p[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      if (!WriteSome(in_, out, &sent)) {
        return absl::UnavailableError(
            absl::StrCat("the process ", Reap(absl::Milliseconds(200)),
                         " before it read the item"));
      }
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[4096];
      const ssize_t n = read(out_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::UnavailableError(
            absl::StrCat("the process ", Reap(absl::Milliseconds(200)),
                         " before it replied"));
      }
      buffered_.append(buf, static_cast<size_t>(n));
    }
  }
}

}  // namespace sqlgroup::cli
