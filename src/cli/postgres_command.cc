// `sqlgroup postgres`: a private PostgreSQL for development and for test
// scripts, until SIGINT or SIGTERM. Prints "dsn: ..." on stdout once it
// accepts connections.
#include <signal.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "cli/flags.h"
#include "cli/signals.h"
#include "cli/subcommands.h"
#include "sqlgroup/private_postgres.h"
#include "status_macros.h"

namespace sqlgroup::cli {

absl::Status RunPostgres(const Args&) {
  const sigset_t signals = BlockStopSignals();
  PrivatePostgresOptions options;
  options.durable = absl::GetFlag(FLAGS_durable);
  ASSIGN_OR_RETURN(auto pg, PrivatePostgres::Start(options));
  std::printf("dsn: %s\n", pg->Dsn().c_str());
  // Said plainly: a developer must not keep data here by mistake.
  std::fprintf(
      stderr,
      "sqlgroup postgres: port %d (a free one, picked at start); "
      "data in %s, deleted when this stops (SIGINT/SIGTERM)%s\n",
      pg->port(), pg->data_dir().c_str(),
      options.durable ? "" : "; fsync off (--durable for crash safety)");
  std::fflush(stdout);
  while (TakeStopSignal(signals, absl::Hours(1)) == 0) {
  }
  return pg->Stop();
}

}  // namespace sqlgroup::cli
