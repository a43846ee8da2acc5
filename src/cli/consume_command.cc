// `sqlgroup consume`: one member, until SIGINT or SIGTERM (graceful).
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <signal.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "cli/flags.h"
#include "cli/handlers.h"
#include "cli/signals.h"
#include "cli/subcommands.h"
#include "dsn.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"
#include "sqlgroup/consumer.h"
#include "status_macros.h"

namespace sqlgroup::cli {

std::shared_ptr<spdlog::logger> CliLogger() {
  static auto* const kLogger = new std::shared_ptr<spdlog::logger>([] {
    auto logger = spdlog::stderr_logger_mt("sqlgroup");
    logger->set_level(spdlog::get_level());
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    return logger;
  }());
  return *kLogger;
}

absl::Status RequireGroupFlag() {
  if (absl::GetFlag(FLAGS_group).empty()) {
    return absl::InvalidArgumentError("--group is required");
  }
  return absl::OkStatus();
}

absl::Status RunConsume(const Args&) {
  RETURN_IF_ERROR(RequireGroupFlag());
  ASSIGN_OR_RETURN(HandlerSpec spec,
                   ParseHandlerSpec(absl::GetFlag(FLAGS_handler)));
  // Before any thread starts, so that all inherit the mask.
  const sigset_t signals = BlockStopSignals();

  ConsumerOptions options;
  options.dsn = ResolveDsn(absl::GetFlag(FLAGS_dsn));
  options.group = absl::GetFlag(FLAGS_group);
  options.instance = absl::GetFlag(FLAGS_instance);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.claim_batch = absl::GetFlag(FLAGS_claim_batch);
  options.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  options.use_notify = absl::GetFlag(FLAGS_notify);
  options.logger = CliLogger();
  Handler handler = MakeHandler(spec);
  if (absl::GetFlag(FLAGS_batch)) {
    options.batch_handler = [handler](const std::vector<Item>& items,
                                      AckTransaction& ack) {
      for (const Item& item : items) RETURN_IF_ERROR(handler(item, ack));
      return absl::OkStatus();
    };
  } else {
    options.handler = handler;
  }
  // The consumer is checked (schema, group) before the port is taken, so a
  // wrong database is reported as such.
  auto registry = std::make_shared<prometheus::Registry>();
  const std::string addr = absl::GetFlag(FLAGS_metrics_addr);
  if (!addr.empty()) options.metrics = registry.get();
  const std::string dsn = options.dsn;
  ASSIGN_OR_RETURN(auto consumer, Consumer::Create(std::move(options)));
  // Only once the schema and the group are known good: bad input changes
  // nothing.
  if (spec.kind == HandlerSpec::Kind::kCount ||
      spec.kind == HandlerSpec::Kind::kRecord) {
    RETURN_IF_ERROR(EnsureDemoTables(dsn));
  }
  std::unique_ptr<prometheus::Exposer> exposer;
  if (!addr.empty()) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(addr);
    } catch (const std::exception& e) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot serve metrics on ", addr, ": ", e.what(),
          "; pass another --metrics_addr (port 0 lets the OS pick one) or "
          "--metrics_addr='' for none"));
    }
    exposer->RegisterCollectable(registry);
    const std::string host = addr.substr(0, addr.rfind(':'));
    for (int port : exposer->GetListeningPorts()) {
      CliLogger()->info("metrics on http://{}:{}/metrics", host, port);
    }
  }
  RETURN_IF_ERROR(consumer->Start());
  CliLogger()->info("consuming group={} handler={} (SIGINT/SIGTERM stops)",
                    absl::GetFlag(FLAGS_group), absl::GetFlag(FLAGS_handler));
  while (consumer->state() == Consumer::State::kRunning) {
    if (const int sig = TakeStopSignal(signals, absl::Milliseconds(200))) {
      CliLogger()->info("signal {}: stopping gracefully", sig);
      break;
    }
  }
  const absl::Status stopped = consumer->Stop();
  const ConsumerStats s = consumer->stats();
  CliLogger()->info(
      "stopped: claimed={} acked={} failed={} dead_lettered={} "
      "lost_claims={} sessions_lost={} rebalances={}",
      s.claimed, s.acked, s.failed, s.dead_lettered, s.lost_claims,
      s.sessions_lost, s.rebalances);
  return stopped;
}

}  // namespace sqlgroup::cli
