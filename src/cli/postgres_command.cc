// `sqlgroup postgres`: a private PostgreSQL for development and for test
// scripts, until SIGINT or SIGTERM. Prints "dsn: ..." on stdout once it
// accepts connections.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
  options.port = absl::GetFlag(FLAGS_port);
  options.dir = absl::GetFlag(FLAGS_data_dir);
  options.keep = absl::GetFlag(FLAGS_keep);
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--port must be 1 to 65535, or 0 for a free one, got ", options.port));
  }
  auto pg = PrivatePostgres::Start(options);
  if (!pg.ok()) {
    // The library's sentence names the port or the directory; say which
    // flag gave it.
    if (options.port > 0 &&
        absl::StrContains(pg.status().message(), "is in use")) {
      return absl::UnavailableError(
          absl::StrCat("--port: ", pg.status().message()));
    }
    if (!options.dir.empty() &&
        absl::StrContains(pg.status().message(), options.dir)) {
      return absl::Status(pg.status().code(),
                          absl::StrCat("--data_dir: ", pg.status().message()));
    }
    return pg.status();
  }
  std::printf("dsn: %s\n", (*pg)->Dsn().c_str());
  // Said plainly: a developer must not keep data here by mistake, nor lose
  // it by mistake.
  const std::string root =
      std::filesystem::path((*pg)->data_dir()).parent_path().string();
  const std::string fate =
      (*pg)->kept()
          ? absl::StrCat("kept when this stops: start again with --data_dir ",
                         root, " to use it")
          : "deleted when this stops (SIGINT/SIGTERM); --data_dir DIR or "
            "--keep keeps it";
  std::fprintf(
      stderr, "sqlgroup postgres: port %d (%s); data in %s%s, %s%s\n",
      (*pg)->port(),
      options.port > 0 ? "--port" : "a free one, picked at start",
      (*pg)->data_dir().c_str(),
      (*pg)->reused() ? " (the cluster of an earlier run)" : "", fate.c_str(),
      options.durable ? "" : "; fsync off (--durable for crash safety)");
  std::fflush(stdout);
  while (TakeStopSignal(signals, absl::Hours(1)) == 0) {
  }
  return (*pg)->Stop();
}

}  // namespace sqlgroup::cli
