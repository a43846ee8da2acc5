// The Consumer facade: validates options, wires the control thread
// (MemberLoop) and the worker pool (PartWorkers) around one PartScheduler,
// and starts and stops their threads in one place.
#include "sqlgroup/consumer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "grant_hint.h"
#include "member/heartbeat_batcher.h"
#include "member/lent_connection.h"
#include "member/member_loop.h"
#include "member/part_scheduler.h"
#include "member/part_worker.h"
#include "metrics.h"
#include "pooler_found.h"
#include "spdlog/sinks/null_sink.h"
#include "spdlog/spdlog.h"
#include "status_macros.h"
#include "store/connection.h"
#include "store/function_ack.h"
#include "store/grant_check.h"
#include "store/member_store.h"
#include "store/migrator.h"

namespace sqlgroup {

// After a sign of work, idle parts are probed every idle_poll for this
// long: a producer that does not NOTIFY tends to send more than one item.
constexpr absl::Duration kStayWarm = absl::Seconds(10);

absl::Status ConsumerOptions::Validate() const {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("ConsumerOptions.", what));
  };
  if (group.empty()) return bad("group is required");
  if (static_timeout < absl::ZeroDuration()) {
    return bad("static_timeout must not be negative");
  }
  if (static_timeout > absl::ZeroDuration()) {
    const bool named =
        !instance.empty() && instance.size() <= 128 &&
        std::all_of(instance.begin(), instance.end(), [](char c) {
          return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                 c == '_' || c == '.' || c == '-';
        });
    if (!named) {
      return bad(absl::StrCat(
          "static_timeout needs an instance name of letters, digits and "
          "\"_.-\" (1..128 characters) that stays the same across restarts, "
          "got '",
          instance, "'"));
    }
  }
  if (static_cast<int>(static_cast<bool>(handler)) +
          static_cast<bool>(batch_handler) + !sql_function.name.empty() !=
      1) {
    return bad("set exactly one of handler, batch_handler and sql_function");
  }
  if (sql_calls_per_commit < 1 || sql_calls_per_commit > 32) {
    return bad(absl::StrCat("sql_calls_per_commit must be 1..32, got ",
                            sql_calls_per_commit));
  }
  if (sql_calls_per_commit > 1 &&
      (sql_function.name.empty() || sql_function.arrays)) {
    return bad(
        "sql_calls_per_commit applies to a sql_function of single items "
        "(called by the statement that acknowledges each item), not to a "
        "handler, a batch handler or a function on arrays");
  }
  if (sql_function.name.empty() && sql_function.arrays) {
    return bad("sql_function.arrays is set without sql_function.name");
  }
  if (!sql_function.name.empty() && !store::IsFunctionName(sql_function.name)) {
    return bad(absl::StrCat(
        "sql_function must be a function's name (schema.name or name: "
        "letters, digits, '_' and '$', not starting with a digit), got '",
        sql_function.name, "'"));
  }
  if (workers < 1 || workers > 256) {
    return bad(absl::StrCat("workers must be 1..256, got ", workers));
  }
  if (!connection_budget && (max_connections < 1 || max_connections > 10000)) {
    return bad(absl::StrCat("max_connections must be 1..10000, got ",
                            max_connections));
  }
  if (idle_connection_timeout < absl::Milliseconds(100)) {
    return bad("idle_connection_timeout must be >= 100ms");
  }
  if (claim_batch < 1 || claim_batch > 10000) {
    return bad(absl::StrCat("claim_batch must be 1..10000, got ", claim_batch));
  }
  if (max_attempts < 1) {
    return bad(absl::StrCat("max_attempts must be >= 1, got ", max_attempts));
  }
  if (lag_interval < absl::ZeroDuration()) {
    return bad("lag_interval must be >= 0");
  }
  if (rebalance_poll < absl::Milliseconds(10) ||
      idle_poll < absl::Milliseconds(1)) {
    return bad("rebalance_poll must be >= 10ms and idle_poll >= 1ms");
  }
  if (rebalance_poll_listening < rebalance_poll) {
    return bad("rebalance_poll_listening must be >= rebalance_poll");
  }
  if (idle_poll_listening < idle_poll) {
    return bad("idle_poll_listening must be >= idle_poll");
  }
  if (drain_timeout < absl::ZeroDuration()) {
    return bad(absl::StrCat("drain_timeout must be >= 0, got ",
                            absl::FormatDuration(drain_timeout)));
  }
  if (backoff_initial <= absl::ZeroDuration()) {
    return bad(absl::StrCat("backoff_initial must be more than 0, got ",
                            absl::FormatDuration(backoff_initial)));
  }
  if (backoff_max < backoff_initial) {
    return bad(
        absl::StrCat("backoff_max must be >= ConsumerOptions.backoff_initial (",
                     absl::FormatDuration(backoff_initial), "), got ",
                     absl::FormatDuration(backoff_max)));
  }
  if (connect_timeout < absl::Seconds(1)) {
    return bad("connect_timeout must be >= 1s");
  }
  if (shared_heartbeat) {
    if (!std::dynamic_pointer_cast<HeartbeatBatcher>(shared_heartbeat)) {
      return bad("shared_heartbeat must come from SharedHeartbeat::Create");
    }
    if (shared_heartbeat->dsn() != dsn) {
      return bad(
          "shared_heartbeat was created for another dsn; its sessions would "
          "be heartbeated in another database");
    }
  }
  return absl::OkStatus();
}

const char* StateName(Consumer::State state) {
  switch (state) {
    case Consumer::State::kCreated:
      return "created";
    case Consumer::State::kRunning:
      return "running";
    case Consumer::State::kStopping:
      return "stopping";
    case Consumer::State::kStopped:
      return "stopped";
    case Consumer::State::kFailed:
      return "failed";
  }
  return "?";
}

namespace {

std::string HostName() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return host;
}

// host:pid when no instance name is given; host:pid/N for the second and
// later consumers of one process, so their metric series stay apart.
std::string DefaultInstance() {
  static std::atomic<int> created{0};
  const std::string host = HostName();
  const int n = created.fetch_add(1);
  return n == 0 ? absl::StrCat(host, ":", getpid())
                : absl::StrCat(host, ":", getpid(), "/", n + 1);
}

}  // namespace

class Consumer::Impl {
 public:
  Impl(ConsumerOptions options, store::GroupSettings settings,
       internal::SchemaState schema)
      : options_(std::move(options)),
        settings_(settings),
        schema_(schema),
        metrics_(
            options_.metrics, options_.group,
            options_.instance.empty() ? DefaultInstance() : options_.instance),
        // Lag is measured only to be published: no registry, no queries.
        budget_(options_.connection_budget ? options_.connection_budget
                                           : std::make_shared<ConnectionBudget>(
                                                 options_.max_connections)),
        scheduler_(options_.idle_poll,
                   options_.metrics != nullptr ? options_.lag_interval
                                               : absl::ZeroDuration(),
                   options_.idle_poll_listening, kStayWarm) {
    log_ =
        options_.logger
            ? options_.logger
            : std::make_shared<spdlog::logger>(
                  "sqlgroup", std::make_shared<spdlog::sinks::null_sink_mt>());
  }

  // Create resolved PoolMode::kAuto.
  bool pooled() const { return options_.pool_mode == PoolMode::kTransaction; }

  absl::Status Start() {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kCreated) {
      return absl::FailedPreconditionError("Consumer::Start called twice");
    }
    metrics_.ConnectionBudget(budget_->limit());
    const internal::BinarySchemas binary = internal::ThisBinary();
    const std::string skew = internal::SkewNote(
        internal::CheckSkew(schema_, binary).value_or(internal::Skew::kSame),
        schema_, binary);
    if (!skew.empty()) log_->warn("group={} {}", options_.group, skew);
    MemberConfig member;
    member.group = options_.group;
    member.use_notify = options_.use_notify;
    member.session = {HostName(), static_cast<int>(getpid()), options_.instance,
                      options_.static_timeout};
    member.rebalance_poll = options_.rebalance_poll;
    member.rebalance_poll_listening = options_.rebalance_poll_listening;
    member.assignor = options_.assignor;
    member.shared_heartbeat =
        std::dynamic_pointer_cast<HeartbeatBatcher>(options_.shared_heartbeat);
    auto ttl_ns = std::make_shared<std::atomic<int64_t>>(
        absl::ToInt64Nanoseconds(settings_.ttl));
    member.ttl_ns = ttl_ns;
    auto key_order = std::make_shared<std::atomic<bool>>(settings_.key_order);
    member.key_order = key_order;
    auto schema_version = std::make_shared<std::atomic<int>>();  // SchemaWatch
    member.schema_version = schema_version;
    member.channel = {.dsn = options_.dsn,
                      .group = options_.group,
                      .connect_timeout = options_.connect_timeout,
                      .use_notify = options_.use_notify,
                      .transaction_pooler = pooled(),
                      .listen_dsn = options_.listen_dsn,
                      .lent = &lent_,
                      .budget = budget_.get()};
    member.schema = schema_;
    member.rebalance = {.group = options_.group,
                        .use_notify = options_.use_notify,
                        .drain_timeout = options_.drain_timeout,
                        .cut_off = options_.cut_off,
                        .listener = options_.listener};
    loop_ = std::make_unique<MemberLoop>(member, settings_, scheduler_,
                                         metrics_, log_);
    WorkerConfig worker;
    worker.connection = {.dsn = options_.dsn,
                         .group = options_.group,
                         .connect_timeout = options_.connect_timeout,
                         .transaction_pooler = pooled(),
                         .ttl_ns = ttl_ns,
                         .key_order = key_order,
                         .schema_version = schema_version,
                         .budget = budget_,
                         .lent = &lent_};
    worker.settle.group = options_.group;
    worker.settle.handler = options_.handler;
    worker.settle.batch_handler = options_.batch_handler;
    worker.settle.kind = {.batched = options_.batch_handler ||
                                     (!options_.sql_function.name.empty() &&
                                      options_.sql_function.arrays),
                          .sql_function = options_.sql_function};
    worker.settle.claim_batch = options_.claim_batch;
    worker.settle.sql_calls_per_commit = options_.sql_calls_per_commit;
    worker.settle.max_attempts = options_.max_attempts;
    worker.settle.backoff_initial = options_.backoff_initial;
    worker.settle.backoff_max = options_.backoff_max;
    worker.settle.transaction_pooler = pooled();
    worker.settle.key_order = key_order;
    worker.idle_connection_timeout = options_.idle_connection_timeout;
    worker.settle.breaker = breaker_;
    // Acks share commits in members of kSharedCommitWorkers or more: with
    // fewer, a worker would mostly wait for a statement it is not in
    // (PostgreSQL already flushes two side-by-side commits together; 8
    // processes of 2 workers drained 0.80x as fast with one line, session
    // 25), while one member of 16 workers drained 1.14x and 1.12x as fast
    // (medians of two runs of bench/drain_bench.py, bench/RESULTS.md).
    if (options_.workers >= SharedCommit::kSharedCommitWorkers) {
      worker.settle.shared_commit = std::make_shared<SharedCommit>();
    }
    // Each worker gathers the acks of single items it handles back to back
    // (GatheredAcks), through the same statement.
    worker.connection.shared_acks =
        worker.settle.shared_commit != nullptr || !worker.settle.kind.batched;
    // No claim while the handler's circuit is open or a probe is out.
    scheduler_.SetGate([breaker = worker.settle.breaker](absl::Time now) {
      return breaker->NoCallBefore(now);
    });
    for (int i = 0; i < options_.workers; ++i) {
      workers_.push_back(
          std::make_unique<PartWorker>(i, worker, scheduler_, metrics_, log_));
    }
    for (auto& w : workers_) {
      threads_.emplace_back([w = w.get()] { w->Run(); });
    }
    control_ = std::thread([this] { loop_->Run(); });
    state_ = State::kRunning;
    return absl::OkStatus();
  }

  absl::Status Stop() {
    absl::MutexLock lock(&stop_mu_);  // one Stop at a time
    {
      absl::MutexLock state_lock(&mu_);
      if (state_ == State::kCreated) {
        state_ = State::kStopped;
        Unreserve();
        return absl::OkStatus();
      }
      if (state_ == State::kStopped || state_ == State::kFailed) {
        return final_;
      }
      state_ = State::kStopping;
    }
    loop_->RequestStop();
    if (control_.joinable()) control_.join();
    scheduler_.Shutdown();  // also when the loop ended on a fatal error
    for (auto& t : threads_) t.join();
    threads_.clear();
    Unreserve();
    absl::MutexLock state_lock(&mu_);
    final_ = loop_->fatal();
    state_ = final_.ok() ? State::kStopped : State::kFailed;
    return final_;
  }

  // Before Stop(): a static member leaves for good.
  void LeaveForGood() {
    absl::MutexLock lock(&mu_);
    if (loop_) loop_->LeaveForGood();
  }

  State state() const {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kRunning && loop_ &&
        loop_->phase() == MemberLoop::Phase::kFailed) {
      return State::kFailed;
    }
    return state_;
  }

  std::string session_id() const {
    return loop_ ? loop_->session_id() : std::string();
  }
  std::vector<int> owned_parts() const {
    return loop_ ? loop_->owned_parts() : std::vector<int>();
  }
  ConsumerStats stats() const { return metrics_.Snapshot(); }
  bool circuit_open() const {
    return breaker_ != nullptr &&
           breaker_->state(absl::Now()) != CircuitBreaker::State::kClosed;
  }

  // The control connection's slot of the budget, kept from Create() (a
  // process creates its consumers before starting any, so the first
  // one's workers cannot take the last's slot) until Stop().
  absl::Status Reserve() {
    if (!budget_->Reserve()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the connection budget of ", budget_->limit(),
          " has no slot left for this consumer's control connection: each "
          "consumer keeps one for as long as it lives, and the budget's "
          "other consumers (and a shared heartbeat) or their workers hold "
          "the rest; give the budget at least one slot per consumer, plus "
          "one for a shared heartbeat"));
    }
    reserved_ = true;
    return absl::OkStatus();
  }
  void Unreserve() {
    if (reserved_) budget_->Unreserve();
    reserved_ = false;
  }

 private:
  ConsumerOptions options_;
  const store::GroupSettings settings_;
  // The database's schema when Create checked that it may run against it.
  const internal::SchemaState schema_;
  std::shared_ptr<spdlog::logger> log_;
  MemberMetrics metrics_;
  std::shared_ptr<ConnectionBudget> budget_;
  bool reserved_ = false;  // Reserve(); Create() and Stop() only
  // The control connection, lent to the workers; outlives both.
  LentConnection lent_;
  PartScheduler scheduler_;
  std::unique_ptr<MemberLoop> loop_;
  // Shared by the workers; circuit_open() reads it from any thread.
  const std::shared_ptr<CircuitBreaker> breaker_ =
      std::make_shared<CircuitBreaker>(CircuitBreaker::Options{});
  std::vector<std::unique_ptr<PartWorker>> workers_;
  std::vector<std::thread> threads_;
  std::thread control_;

  absl::Mutex stop_mu_;
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kCreated;
  absl::Status final_ ABSL_GUARDED_BY(mu_);
};

Consumer::Consumer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Consumer::~Consumer() {
  if (impl_) impl_->Stop().IgnoreError();
}

absl::StatusOr<std::unique_ptr<Consumer>> Consumer::Create(
    ConsumerOptions options) {
  RETURN_IF_ERROR(options.Validate());
  store::ConnectOptions connect;
  connect.connect_timeout = options.connect_timeout;
  connect.application_name = "sqlgroup-consumer";
  store::SetPoolMode(connect, options.pool_mode);
  ASSIGN_OR_RETURN(auto conn, store::Connect(options.dsn, connect));
  const PoolMode asked = options.pool_mode;
  options.pool_mode =
      internal::Resolved(asked, store::TransactionPooled(*conn));
  if (asked == PoolMode::kAuto && options.pool_mode == PoolMode::kTransaction &&
      options.logger) {
    options.logger->info(internal::PoolerFound(
        absl::StrCat("group ", options.group, "'s member")));
  }
  const absl::StatusOr<internal::SchemaState> served =
      store::CheckSchemaServed(*conn);
  if (!served.ok()) {
    return internal::WithGrantHint(served.status(), options.dsn, "member");
  }
  const internal::SchemaState schema = *served;
  absl::StatusOr<store::GroupSettings> read =
      store::ReadGroup(*conn, options.group);
  if (!read.ok()) {
    return internal::WithGrantHint(
        store::MissingOrNotGranted(*conn, "member", options.group,
                                   read.status()),
        options.dsn, "member", options.group);
  }
  store::GroupSettings settings = std::move(*read);
  if (!options.sql_function.name.empty()) {
    RETURN_IF_ERROR(store::CheckSqlFunction(*conn, options.sql_function));
  }
  if (options.static_timeout > absl::ZeroDuration() &&
      options.static_timeout < settings.heartbeat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConsumerOptions.static_timeout (",
        absl::FormatDuration(options.static_timeout), ") is below group ",
        options.group, "'s heartbeat interval (",
        absl::FormatDuration(settings.heartbeat),
        "): a restart could never come back in time; use at least the "
        "interval, typically the time a restart takes plus a margin"));
  }
  auto impl = std::make_unique<Impl>(std::move(options), settings, schema);
  RETURN_IF_ERROR(impl->Reserve());
  return std::unique_ptr<Consumer>(new Consumer(std::move(impl)));
}

absl::Status Consumer::Start() { return impl_->Start(); }
absl::Status Consumer::Stop() { return impl_->Stop(); }
absl::Status Consumer::Leave() {
  impl_->LeaveForGood();
  return impl_->Stop();
}
Consumer::State Consumer::state() const { return impl_->state(); }
std::string Consumer::session_id() const { return impl_->session_id(); }
std::vector<int> Consumer::owned_parts() const { return impl_->owned_parts(); }
bool Consumer::circuit_open() const { return impl_->circuit_open(); }
ConsumerStats Consumer::stats() const { return impl_->stats(); }

}  // namespace sqlgroup
