// What `sqlgroup consume` serves on --metrics_addr: /metrics (Prometheus'
// text format), /healthz (the process runs its loops: for a liveness
// probe) and /readyz (its members take items: for a readiness probe). A
// failing probe answers 503 with the reason, one line per member.
#ifndef SQLGROUP_CLI_METRICS_SERVER_H_
#define SQLGROUP_CLI_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct mg_context;
struct mg_connection;

namespace prometheus {
class Registry;
}

namespace sqlgroup::cli {

struct HealthChecks {
  // OK, or why not (each returns a sentence); called on the server's
  // threads.
  std::function<absl::Status()> live;
  std::function<absl::Status()> ready;
};

// OK for an address Start can listen on as written: "HOST:PORT" with an
// IPv4 address or a bracketed IPv6 one ("[::1]:9464"), or a bare PORT; the
// port 0 to 65535. INVALID_ARGUMENT naming --metrics_addr otherwise.
absl::Status CheckListenAddress(const std::string& addr);

class MetricsServer {
 public:
  // Listens on `addr` ("host:port"; port 0: one the OS picks).
  // FAILED_PRECONDITION saying so when the port is taken or the address
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& addr, std::shared_ptr<prometheus::Registry> registry,
      HealthChecks health);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  std::vector<int> ports() const;

 private:
  MetricsServer(std::shared_ptr<prometheus::Registry> registry,
                HealthChecks health)
      : registry_(std::move(registry)), health_(std::move(health)) {}
  static int Metrics(mg_connection* conn, void* self);
  static int Healthz(mg_connection* conn, void* self);
  static int Readyz(mg_connection* conn, void* self);

  const std::shared_ptr<prometheus::Registry> registry_;
  const HealthChecks health_;
  mg_context* context_ = nullptr;
};

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_METRICS_SERVER_H_
