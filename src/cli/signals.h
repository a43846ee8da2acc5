// SIGINT and SIGTERM, taken synchronously: blocked in every thread (the
// mask is inherited), then waited for or polled where it suits.
#ifndef SQLGROUP_CLI_SIGNALS_H_
#define SQLGROUP_CLI_SIGNALS_H_

#include <signal.h>

#include "absl/time/time.h"

namespace sqlgroup::cli {

// Blocks SIGINT and SIGTERM in the calling thread and every thread it
// starts from now on; returns the set.
sigset_t BlockStopSignals();

// The stop signal that arrived within `wait` (0 polls), or 0.
int TakeStopSignal(const sigset_t& signals, absl::Duration wait);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_SIGNALS_H_
