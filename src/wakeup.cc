#include "wakeup.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace sqlgroup {

Wakeup::Wakeup() {
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  }
  read_fd_ = fds[0];
  write_fd_ = fds[1];
}

Wakeup::~Wakeup() {
  close(read_fd_);
  close(write_fd_);
}

void Wakeup::Signal() {
  const char byte = 1;
  // A full pipe is already readable: nothing is lost when this fails.
  (void)!write(write_fd_, &byte, 1);
}

void Wakeup::Clear() {
  char buf[64];
  while (read(read_fd_, buf, sizeof buf) > 0) {
  }
}

int PollTimeoutMs(absl::Duration timeout) {
  const absl::Duration bounded =
      std::clamp(timeout, absl::ZeroDuration(), absl::Hours(1));
  return static_cast<int>(
      absl::ToInt64Milliseconds(absl::Ceil(bounded, absl::Milliseconds(1))));
}

bool Wakeup::WaitFor(absl::Duration timeout) const {
  pollfd fd = {read_fd_, POLLIN, 0};
  return poll(&fd, 1, PollTimeoutMs(timeout)) > 0;
}

}  // namespace sqlgroup
