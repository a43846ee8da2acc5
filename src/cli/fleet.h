// The demo's consumer processes: `sqlgroup consume` children started,
// killed (-9), stopped (SIGTERM) and reaped. Children get a parent-death
// signal, so none outlives the demo.
#ifndef SQLGROUP_CLI_FLEET_H_
#define SQLGROUP_CLI_FLEET_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sqlgroup::cli {

class Fleet {
 public:
  // `args` are the consume arguments shared by every member; each gets
  // --instance NAME and its stderr in log_dir/NAME.log.
  Fleet(std::vector<std::string> args, std::string log_dir);
  ~Fleet();  // SIGKILLs whatever still runs

  absl::Status Start(const std::string& instance);
  // kill -9: no goodbye, the session must expire.
  absl::Status Kill(const std::string& instance);
  // SIGTERM and wait up to `timeout` for a graceful exit; exit code.
  absl::StatusOr<int> Stop(const std::string& instance, absl::Duration timeout);
  std::vector<std::string> running() const;

 private:
  const std::vector<std::string> args_;
  const std::string log_dir_;
  std::map<std::string, pid_t> pids_;
};

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_FLEET_H_
