// A long-lived child process spoken to one line at a time over its stdin
// and stdout: the process behind `--handler exec:CMD`. Started without a
// shell (argv[0] looked up in PATH), in a process group of its own (a
// Ctrl-C at the terminal reaches sqlgroup, which drains, not the child
// mid-item), with the default signal mask and SIGPIPE handling; its stderr
// is sqlgroup's.
//
// Thread safety: one LineChild belongs to one thread.
#ifndef SQLGROUP_CLI_HANDLERS_LINE_CHILD_H_
#define SQLGROUP_CLI_HANDLERS_LINE_CHILD_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sqlgroup::cli {

class LineChild {
 public:
  // Starts `argv`. UNAVAILABLE with the reason if it cannot be started.
  static absl::StatusOr<std::unique_ptr<LineChild>> Start(
      const std::vector<std::string>& argv);
  // Closes its stdin (the child should exit at end of input), waits up to
  // two seconds, then kills it.
  ~LineChild();
  LineChild(const LineChild&) = delete;
  LineChild& operator=(const LineChild&) = delete;

  // Writes `line` and a newline, and returns the next line the child
  // writes, without its newline; writing and reading together take at most
  // `timeout`. UNAVAILABLE when the child has exited or
  // closed its stdout (the message says how it ended), DEADLINE_EXCEEDED
  // when no line came within `timeout` (the child is then killed: a reply
  // that comes late would answer the wrong item). Either way the child is
  // unusable afterwards (alive() is false). CANCELLED, the child killed
  // likewise, once `cut` (optional) turns true before the reply came.
  absl::StatusOr<std::string> Exchange(const std::string& line,
                                       absl::Duration timeout,
                                       const std::atomic<bool>* cut = nullptr);
  bool alive() const { return pid_ > 0 && in_ >= 0; }
  // True when the child wrote something no item asked for (a second line
  // for the last item): its next line would answer the wrong item.
  bool HasUnreadOutput();
  // OK if the child is still running after `wait` (it waits for items on
  // stdin); FAILED_PRECONDITION saying how it ended otherwise.
  absl::Status StillRunningAfter(absl::Duration wait);
  pid_t pid() const { return pid_; }

 private:
  LineChild(pid_t pid, int in, int out) : pid_(pid), in_(in), out_(out) {}
  // Whether its stdout has something to read (or its end) right now.
  bool Readable() const;
  // Kills and reaps the child (SIGKILL to its process group after `grace`
  // since its stdin was closed); returns how it ended, as a phrase.
  std::string Reap(absl::Duration grace);

  pid_t pid_;
  int in_;                // the child's stdin (write end)
  int out_;               // the child's stdout (read end)
  std::string buffered_;  // read past the last line returned
};

// Splits a command line into words as a POSIX shell would for plain words,
// '…' and "…" quotes and backslash escapes (no variables, globs or
// redirections). INVALID_ARGUMENT for an unterminated quote or no words.
absl::StatusOr<std::vector<std::string>> SplitCommandLine(
    const std::string& text);

// The path `program` runs from: itself when it names a path (has a '/'),
// else the first executable match in $PATH. NOT_FOUND if none.
absl::StatusOr<std::string> FindProgram(const std::string& program);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_HANDLERS_LINE_CHILD_H_
