// `sqlgroup consume`: one member (or --members N sharing a heartbeat), until
// SIGINT or SIGTERM (graceful).
#include <prometheus/registry.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "cli/flags.h"
#include "cli/fleet_health.h"
#include "cli/handlers/handler_spec.h"
#include "cli/handlers/in_flight_calls.h"
#include "cli/metrics_server.h"
#include "cli/signals.h"
#include "cli/subcommands.h"
#include "dsn.h"
#include "member/backoff.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/shared_heartbeat.h"
#include "status_macros.h"
#include "store/connection.h"
#include "url_secrets.h"

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

// The library names ConsumerOptions fields; a person at the command line
// set flags. Fields with a flag of the same name are renamed; the rest of
// the message stays as it was.
absl::Status InFlagTerms(const absl::Status& s) {
  if (s.ok()) return s;
  std::string text(s.message());
  for (const char* field :
       {"static_timeout", "instance", "workers", "claim_batch",
        "sql_calls_per_commit", "max_attempts", "backoff_initial",
        "backoff_max", "group", "drain_timeout", "idle_connection_timeout",
        "handler_timeout"}) {
    absl::StrReplaceAll(
        {{absl::StrCat("ConsumerOptions.", field), absl::StrCat("--", field)}},
        &text);
  }
  absl::Status out(s.code(), text);
  s.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

namespace {

std::vector<const Consumer*> ConstPointers(
    const std::vector<std::unique_ptr<Consumer>>& consumers) {
  std::vector<const Consumer*> out;
  for (const auto& c : consumers) out.push_back(c.get());
  return out;
}

}  // namespace

absl::Status RunConsume(const Args&) {
  RETURN_IF_ERROR(RequireGroupFlag());
  ASSIGN_OR_RETURN(HandlerSpec spec,
                   ParseHandlerSpec(absl::GetFlag(FLAGS_handler)));
  const double fail_rate = absl::GetFlag(FLAGS_fail_rate);
  RETURN_IF_ERROR(CheckFailRate(fail_rate));
  const int members = absl::GetFlag(FLAGS_members);
  if (members < 1 || members > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--members must be 1..1000, got ", members));
  }
  // Before any thread starts, so that all inherit the mask.
  const sigset_t signals = BlockStopSignals();

  ConsumerOptions options;
  // The handler calls in flight, which a revoke or a stop cuts off after
  // --drain_timeout, and a second signal at once.
  auto calls = std::make_shared<InFlightCalls>();
  auto registry = std::make_shared<prometheus::Registry>();
  const std::string addr = absl::GetFlag(FLAGS_metrics_addr);
  std::vector<std::unique_ptr<Consumer>> consumers;
  // Checks the input and the database and makes the members; nothing
  // starts yet.
  auto prepare = [&]() -> absl::Status {
    if (!addr.empty()) RETURN_IF_ERROR(CheckListenAddress(addr));
    options = ConsumerOptions();
    consumers.clear();
    options.dsn = ResolveDsn(absl::GetFlag(FLAGS_dsn));
    options.group = absl::GetFlag(FLAGS_group);
    options.workers = absl::GetFlag(FLAGS_workers);
    options.claim_batch = absl::GetFlag(FLAGS_claim_batch);
    options.sql_calls_per_commit = absl::GetFlag(FLAGS_sql_calls_per_commit);
    options.max_attempts = absl::GetFlag(FLAGS_max_attempts);
    options.backoff_initial = absl::GetFlag(FLAGS_backoff_initial);
    options.backoff_max = absl::GetFlag(FLAGS_backoff_max);
    options.use_notify = absl::GetFlag(FLAGS_notify);
    ASSIGN_OR_RETURN(options.pool_mode, PoolModeFlag());
    options.listen_dsn = absl::GetFlag(FLAGS_listen_dsn);
    options.logger = CliLogger();
    {
      const HandlerContext context{
          .dsn = options.dsn,
          .batch = absl::GetFlag(FLAGS_batch),
          .timeout = absl::GetFlag(FLAGS_handler_timeout),
          .fail_rate = fail_rate,
          .calls = calls,
          .logger = CliLogger(),
          .headers_file = absl::GetFlag(FLAGS_handler_headers),
          .group = absl::GetFlag(FLAGS_group)};
      if (context.timeout <= absl::ZeroDuration()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--handler_timeout must be more than 0, got ",
                         absl::FormatDuration(context.timeout)));
      }
      // Checked (a SQL statement on the database) before any member starts:
      // a bad handler claims nothing.
      ASSIGN_OR_RETURN(Handlers handlers, BuildHandlers(spec, context));
      options.handler = std::move(handlers.handler);
      options.batch_handler = std::move(handlers.batch_handler);
      options.sql_function = std::move(handlers.sql_function);
      if (options.sql_calls_per_commit > 1 &&
          (options.sql_function.name.empty() || options.sql_function.arrays)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--sql_calls_per_commit groups the calls of a function that the "
            "statement acknowledging each item makes (--handler "
            "sql:FUNCTION); --handler=",
            spec.given,
            " is not called so (a statement, --batch, --fail_rate, a "
            "function that returns a set, or another kind of handler). Leave "
            "--sql_calls_per_commit at 1"));
      }
      // What the handler may take: a call is cut off at its own timeout
      // anyway (a SQL statement at the group's statement cut-off).
      options.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
      if (options.drain_timeout == absl::ZeroDuration()) {
        options.drain_timeout = context.timeout;
      }
      options.cut_off = [calls](const std::string& session,
                                const std::vector<int>& parts) {
        if (const int n = calls->CutOff(session, parts); n > 0) {
          CliLogger()->info("cut off {} handler call(s) on parts {}", n,
                            absl::StrJoin(parts, ","));
        }
      };
    }
    // The consumers are checked (schema, group) before the port is taken, so
    // a wrong database is reported as such.
    if (!addr.empty()) options.metrics = registry.get();
    // One budget for the process: a control connection per member, one for
    // the shared heartbeat, and workers' connections while there is work.
    const int kept = members + (members > 1 ? 1 : 0);
    int max_connections = absl::GetFlag(FLAGS_max_connections);
    if (max_connections == 0) {
      // The budget follows --workers: say so when that is what is wrong.
      const int workers = absl::GetFlag(FLAGS_workers);
      if (workers < 1 || kept + workers > ConnectionBudget::kMaxLimit) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--workers=", workers, ": give 1 to ",
            ConnectionBudget::kMaxLimit - kept,
            " (each worker may hold a database connection of its own)"));
      }
      max_connections = kept + workers;
    }
    if (max_connections < kept) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max_connections=", max_connections, " cannot hold ",
          members > 1 ? absl::StrCat(members,
                                     " members' control connections "
                                     "and their shared heartbeat's")
                      : "the member's control connection",
          ": give at least ", kept,
          " (each worker beyond that needs one more to run in parallel)"));
    }
    auto budget = ConnectionBudget::Create(max_connections);
    if (!budget.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max_connections must be 1..10000, got ", max_connections));
    }
    options.connection_budget = *budget;
    options.idle_connection_timeout =
        absl::GetFlag(FLAGS_idle_connection_timeout);
    if (members > 1) {
      ASSIGN_OR_RETURN(options.shared_heartbeat,
                       SharedHeartbeat::Create(
                           {.dsn = options.dsn,
                            .pool_mode = options.pool_mode,
                            .connection_budget = options.connection_budget}));
    }
    const std::string instance = absl::GetFlag(FLAGS_instance);
    for (int i = 0; i < members; ++i) {
      ConsumerOptions o = options;
      o.static_timeout = absl::GetFlag(FLAGS_static_timeout);
      // Empty: host:pid, and host:pid/N for the second and later (NAME-N for
      // static members, whose names are plain).
      o.instance =
          instance.empty() || members == 1
              ? instance
              : absl::StrCat(
                    instance,
                    o.static_timeout > absl::ZeroDuration() ? "-" : "/", i + 1);
      auto consumer = Consumer::Create(std::move(o));
      if (!consumer.ok()) return InFlagTerms(consumer.status());
      consumers.push_back(std::move(*consumer));
    }
    // Only once the schema and the group are known good: bad input changes
    // nothing.
    if (spec.kind == HandlerSpec::Kind::kCount ||
        spec.kind == HandlerSpec::Kind::kRecord) {
      RETURN_IF_ERROR(EnsureDemoTables(options.dsn));
    }
    return absl::OkStatus();
  };
  // Metrics and the probes: once the input is known good, and before a
  // wait for the server below, so that a probe has an answer then.
  FleetHealth health;
  health.Waiting("starting: checking the group and the database");
  std::unique_ptr<MetricsServer> server;
  auto serve = [&]() -> absl::Status {
    if (addr.empty() || server != nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(
        server,
        MetricsServer::Start(addr, registry,
                             {.live = [&health] { return health.Live(); },
                              .ready = [&health] { return health.Ready(); }}));
    const std::string host = addr.substr(0, addr.rfind(':'));
    for (int port : server->ports()) {
      CliLogger()->info(
          "metrics on http://{}:{}/metrics, health on /healthz and /readyz",
          host, port);
    }
    return absl::OkStatus();
  };
  // A server that takes no more connections (max_connections reached, or
  // starting or stopping) is waited out, said once: a member of a fleet
  // that outgrew its server joins when connections free up.
  for (int attempt = 1;; ++attempt) {
    const absl::Status s = prepare();
    if (s.ok()) break;
    if (!store::ServerBusy(s)) return s;
    if (attempt == 1) {
      CliLogger()->warn(
          "{}; waiting for the server to take connections, retrying with "
          "backoff up to 5 s (SIGINT/SIGTERM stops)",
          std::string(s.message()));
      health.Waiting(
          absl::StrCat("waiting for the database server to take connections: ",
                       s.message()));
      RETURN_IF_ERROR(serve());
    }
    const absl::Duration pause =
        Backoff(attempt, absl::Milliseconds(200), absl::Seconds(5));
    if (const int sig = TakeStopSignal(signals, pause); sig != 0) {
      CliLogger()->info("signal {}: stopping before the start", sig);
      return absl::OkStatus();
    }
  }
  RETURN_IF_ERROR(serve());
  health.Running(ConstPointers(consumers));
  // One after another, each once the last has registered (or a second
  // passed): N members connecting and joining in the same instant make a
  // storm of connections and rebalances that a busy server can fall
  // behind on for good (connects time out, are retried, and pile up).
  // A stop signal during the start stops what has started.
  int sig = 0;
  for (auto& consumer : consumers) {
    RETURN_IF_ERROR(consumer->Start());
    const absl::Time deadline = absl::Now() + absl::Seconds(1);
    while (sig == 0 && consumer->session_id().empty() &&
           absl::Now() < deadline) {
      sig = TakeStopSignal(signals, absl::Milliseconds(5));
    }
    if (sig != 0) break;
  }
  if (sig == 0) {
    CliLogger()->info(
        "consuming group={} handler={} fail_rate={} members={} "
        "(SIGINT/SIGTERM stops)",
        options.group, MaskUrlsIn(absl::GetFlag(FLAGS_handler)), fail_rate,
        members);
  }
  auto all_running = [&] {
    for (const auto& c : consumers) {
      if (c->state() != Consumer::State::kRunning) return false;
    }
    return true;
  };
  while (sig == 0 && all_running()) {
    sig = TakeStopSignal(signals, absl::Milliseconds(200));
  }
  health.Stopping();
  if (sig != 0) {
    CliLogger()->info(
        "signal {}: stopping gracefully once the handler calls in flight "
        "return (cut off after {}, --drain_timeout; a second signal cuts "
        "them off now)",
        sig, absl::FormatDuration(options.drain_timeout));
  }
  // Stopped together: each drains and leaves at once, so the parts of all
  // move in one rebalance rather than one member after another.
  std::vector<std::thread> stops;
  std::vector<absl::Status> stopped(consumers.size());
  std::atomic<size_t> done{0};
  for (size_t i = 0; i < consumers.size(); ++i) {
    stops.emplace_back([&, i] {
      stopped[i] = consumers[i]->Stop();
      ++done;
    });
  }
  // A second signal does not wait for the handlers: their calls are cut
  // off (and those that begin after, such as a batch's next item), and
  // their items come back later with the attempt counted.
  bool cut = false;
  while (done < consumers.size()) {
    if (TakeStopSignal(signals, absl::Milliseconds(50)) != 0 && !cut) {
      cut = true;
      CliLogger()->warn(
          "second signal: cutting off the handler calls in flight; their "
          "items are retried later, the attempt counted");
    }
    if (cut) calls->CutOffAll();
  }
  for (auto& t : stops) t.join();
  ConsumerStats total;
  for (const auto& c : consumers) {
    const ConsumerStats s = c->stats();
    total.claimed += s.claimed;
    total.acked += s.acked;
    total.failed += s.failed;
    total.dead_lettered += s.dead_lettered;
    total.lost_claims += s.lost_claims;
    total.sessions_lost += s.sessions_lost;
    total.rebalances += s.rebalances;
  }
  CliLogger()->info(
      "stopped: claimed={} acked={} failed={} dead_lettered={} "
      "lost_claims={} sessions_lost={} rebalances={}",
      total.claimed, total.acked, total.failed, total.dead_lettered,
      total.lost_claims, total.sessions_lost, total.rebalances);
  for (const absl::Status& s : stopped) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

}  // namespace sqlgroup::cli
