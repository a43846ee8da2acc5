// What the members of one `sqlgroup consume` process say to /healthz and
// /readyz (cli/metrics_server.h): the main thread tells it where the
// process is (waiting for the server, running, stopping); the server's
// threads ask.
#ifndef SQLGROUP_CLI_FLEET_HEALTH_H_
#define SQLGROUP_CLI_FLEET_HEALTH_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "sqlgroup/consumer.h"

namespace sqlgroup::cli {

class FleetHealth {
 public:
  // Not started yet, for this reason ("waiting for the server to take
  // connections").
  void Waiting(std::string why);
  // The members run; they outlive this object's use (the server stops
  // first).
  void Running(std::vector<const Consumer*> members);
  void Stopping();

  // Live unless a member failed (the process is about to exit).
  absl::Status Live() const;
  // Ready while every member is running with a session and a closed
  // circuit; else UNAVAILABLE with a line per member that is not.
  absl::Status Ready() const;

 private:
  mutable absl::Mutex mu_;
  std::string waiting_ ABSL_GUARDED_BY(mu_) = "starting";
  std::vector<const Consumer*> members_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_FLEET_HEALTH_H_
