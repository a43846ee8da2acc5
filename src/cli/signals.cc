#include "cli/signals.h"

namespace sqlgroup::cli {

sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

int TakeStopSignal(const sigset_t& signals, absl::Duration wait) {
  const timespec ts = absl::ToTimespec(wait);
  const int sig = sigtimedwait(&signals, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

}  // namespace sqlgroup::cli
