// A file descriptor that becomes readable when another thread calls
// Signal(): lets a thread block in poll() on a socket and still be woken
// promptly (a stop request) without waking up on a timer to check.
// Once signaled it stays readable until Clear() (a stop request is never
// cleared).
// Thread safety: all methods from any thread.
#ifndef SQLGROUP_WAKEUP_H_
#define SQLGROUP_WAKEUP_H_

#include "absl/time/time.h"

namespace sqlgroup {

// `timeout` as poll(2) takes it: whole milliseconds, rounded up (so a wait
// never ends before its deadline), at least 0, at most an hour.
int PollTimeoutMs(absl::Duration timeout);

class Wakeup {
 public:
  Wakeup();
  ~Wakeup();
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;

  // Makes fd() readable from now on.
  void Signal();
  // Makes fd() unreadable again, until the next Signal().
  void Clear();
  // Blocks until Signal() was called or `timeout` passed; true if signaled.
  bool WaitFor(absl::Duration timeout) const;
  int fd() const { return read_fd_; }

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_WAKEUP_H_
