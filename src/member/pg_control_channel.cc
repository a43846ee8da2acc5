#include "member/pg_control_channel.h"

#include <poll.h>

#include <algorithm>
#include <pqxx/connection>

#include "absl/time/clock.h"
#include "member/backoff.h"
#include "spdlog/spdlog.h"
#include "store/errors.h"
#include "store/member_store.h"

namespace sqlgroup {
namespace {

// How often the control thread looks at its connection's socket again
// while a worker has borrowed it.
constexpr absl::Duration kBorrowedPoll = absl::Milliseconds(20);

}  // namespace

PgControlChannel::PgControlChannel(ControlChannelConfig config,
                                   const NotificationRouter& router,
                                   PartScheduler& scheduler,
                                   MemberMetrics& metrics,
                                   std::shared_ptr<spdlog::logger> logger,
                                   const Wakeup& stop)
    : config_(std::move(config)),
      router_(router),
      scheduler_(scheduler),
      metrics_(metrics),
      log_(std::move(logger)),
      stop_(stop) {}

PgControlChannel::~PgControlChannel() {
  // Before the connection they are registered with.
  session_listener_.reset();
  listener_.reset();
}

absl::Status PgControlChannel::Connect() {
  if (conn_) return absl::OkStatus();
  retry_delay_ = absl::ZeroDuration();
  // (A leave is flushed anyway: lost, its parts would wait out the TTL.)
  const store::ConnectOptions options = ControlOptions();
  auto conn = store::Connect(config_.dsn, options);
  if (!conn.ok()) {
    ++connect_failures_;
    const bool busy = store::ServerBusy(conn.status());
    if (busy) metrics_.ConnectionRefused();
    // A full server is a condition to wait out: said once per episode,
    // with backoff and jitter up to 5 s so that a waiting fleet does not
    // knock in step. Other failures are said on every attempt.
    if (!busy || !waiting_for_server_) {
      log_->warn("group={} control connection failed (attempt {}): {}{}",
                 config_.group, connect_failures_,
                 std::string(conn.status().message()),
                 busy ? "; waiting for the server to take connections, "
                        "quietly until it does"
                      : "");
    }
    waiting_for_server_ = busy;
    retry_delay_ = Backoff(connect_failures_, absl::Milliseconds(100),
                           busy ? absl::Seconds(5) : absl::Seconds(2));
    return conn.status();
  }
  if (waiting_for_server_) {
    log_->info("group={} the server takes connections again", config_.group);
  }
  waiting_for_server_ = false;
  if (!UseControl(std::move(*conn), options)) {
    return absl::UnavailableError("the new control connection broke at once");
  }
  // Every "dropped" gets its "restored", even when the first try succeeds.
  if (dropped_ || connect_failures_ > 0) {
    log_->info("group={} control connection restored", config_.group);
  }
  dropped_ = false;
  connect_failures_ = 0;
  return absl::OkStatus();
}

bool PgControlChannel::UseControl(std::unique_ptr<pqxx::connection> conn,
                                  const store::ConnectOptions& options) {
  conn_ = std::move(conn);
  config_.lent->Set(conn_.get(), options);
  followed_ttl_ = ttl_;
  metrics_.ConnectionOpened("control");
  store::PrepareMemberStatements(*conn_);  // lazily: no round trip here
  StartListening();
  return conn_ != nullptr;  // else a LISTEN found the connection broken
}

pqxx::connection& PgControlChannel::ListenConnection() {
  return listen_conn_ ? *listen_conn_ : *conn_;
}

std::unique_ptr<store::ChannelListener> PgControlChannel::Listen(
    const std::string& channel) {
  return std::make_unique<store::ChannelListener>(
      ListenConnection(), channel,
      [this](const std::string& payload) { router_.Route(payload); });
}

void PgControlChannel::StartListening() {
  if (!config_.use_notify || listener_ || !conn_) return;
  // Through a pooler in transaction mode a LISTEN would hold on to
  // whichever server connection ran it, for nobody: without a direct
  // connection to listen on, the member polls.
  if (config_.transaction_pooler && config_.listen_dsn.empty()) return;
  if (absl::Now() < next_listen_try_) return;
  if (!config_.listen_dsn.empty() && !listen_conn_) {
    store::ConnectOptions options;
    options.connect_timeout = config_.connect_timeout;
    options.application_name = "sqlgroup-listen";
    auto conn = store::Connect(config_.listen_dsn, options);
    if (!conn.ok()) {
      StopListening(conn.status());
      return;
    }
    listen_conn_ = std::move(*conn);
    metrics_.ConnectionOpened("listen");
  }
  absl::Status s =
      store::Guard("listen", [&] { listener_ = Listen(store::kChannel); });
  if (!s.ok()) {
    StopListening(s);
    if (!listen_conn_ && absl::IsUnavailable(s)) Disconnect(s);
    return;
  }
  if (listen_failures_ > 0) {
    log_->info("group={} listening for NOTIFYs again", config_.group);
  }
  listen_failures_ = 0;
  // Idle parts may be probed less often only while NOTIFYs reach us.
  scheduler_.SetListening(true);
  if (!session_.empty()) {
    const absl::Status listened = ListenForSession();
    if (absl::IsUnavailable(listened) || absl::IsUnknown(listened)) {
      Disconnect(listened);
    } else if (!listened.ok()) {
      log_->warn("group={} session={} {}", config_.group, session_,
                 std::string(listened.message()));
    }
  }
}

void PgControlChannel::StopListening(const absl::Status& why) {
  session_listener_.reset();
  listener_.reset();
  if (listen_conn_) metrics_.ConnectionClosed("listen");
  listen_conn_.reset();
  scheduler_.SetListening(false);
  // Once per episode: a listen connection that stays out of reach is
  // tried again with backoff, quietly.
  if (listen_failures_++ == 0) {
    log_->warn("group={} cannot LISTEN, polling until it can: {}",
               config_.group, std::string(why.message()));
  }
  next_listen_try_ =
      absl::Now() +
      Backoff(listen_failures_, absl::Milliseconds(500), absl::Seconds(30));
}

absl::Status PgControlChannel::ListenForSession() {
  session_listener_.reset();
  if (!listener_) return absl::OkStatus();  // polling covers it
  absl::Status s = store::Guard("listen", [&] {
    session_listener_ = Listen(store::SessionChannel(session_));
  });
  // Waiting members poll briskly anyway; this only makes them faster.
  if (s.ok()) return s;
  if (listen_conn_) {
    StopListening(s);
    return absl::OkStatus();  // the control connection is fine
  }
  return s;
}

store::ConnectOptions PgControlChannel::ControlOptions() const {
  store::ConnectOptions options = store::CoordinationOptions(
      "sqlgroup-control", ttl_, config_.connect_timeout);
  options.idle_in_transaction_timeout = ttl_;
  options.transaction_pooler = config_.transaction_pooler;
  return options;
}

absl::Status PgControlChannel::FollowTtl() {
  if (!conn_) return absl::OkStatus();
  const absl::StatusOr<bool> set =
      config_.lent->session().timeouts.Follow(*conn_, ControlOptions());
  if (!set.ok()) return set.status();
  if (*set && ttl_ != followed_ttl_) {
    followed_ttl_ = ttl_;
    log_->info(
        "group={} session={} session TTL is now {}: the control "
        "connection's timeouts follow",
        config_.group, session_, absl::FormatDuration(ttl_));
  }
  return absl::OkStatus();
}

void PgControlChannel::Disconnect(const absl::Status& why) {
  if (!why.ok()) {
    log_->warn("group={} session={} control connection dropped: {}",
               config_.group, session_, std::string(why.message()));
  }
  session_listener_.reset();
  listener_.reset();
  if (listen_conn_) metrics_.ConnectionClosed("listen");
  listen_conn_.reset();
  if (conn_) {
    config_.lent->Set(nullptr, {});
    metrics_.ConnectionClosed("control");
  }
  conn_.reset();
  dropped_ = true;
  scheduler_.SetListening(false);
}

absl::StatusOr<bool> PgControlChannel::TakeBack(const KeepAlive& keep_alive,
                                                bool may_replace) {
  // A worker's task on the control connection may outlast a heartbeat (a
  // slow handler of the first claim after a quiet spell): the control
  // thread then leaves the connection to it and goes on with a new one,
  // so that heartbeats, rebalancing and reaping never wait for a handler.
  std::optional<bool> held;
  while (!(held = config_.lent->Hold(session_.empty()
                                         ? absl::InfiniteFuture()
                                         : keep_alive.replace_at()))) {
    if (!may_replace) continue;
    if (ReplaceControl()) return true;
    keep_alive.keep_alive();
  }
  if (!*held) {
    return absl::UnavailableError(
        "a worker found the control connection broken");
  }
  // A borrower may have set a worker's limits.
  const absl::Status followed = FollowTtl();
  if (!followed.ok()) return followed;
  return false;
}

// What the control thread leaves to a worker that keeps its connection:
// closed on the worker's thread when it gives the connection back, with
// the slot that connection held (the new one has the worker's).
struct PgControlChannel::Orphan {
  std::unique_ptr<store::ChannelListener> session_listener;
  // Before the connection they are on.
  std::unique_ptr<store::ChannelListener> listener;
  std::unique_ptr<pqxx::connection> conn;
  ConnectionBudget* budget;
  MemberMetrics* metrics;
  ~Orphan() {
    session_listener.reset();
    listener.reset();
    conn.reset();
    metrics->ConnectionClosed("control");
    // The control connection's kept slot is the new one's now, and the
    // slot the worker lent is free again.
    budget->Release();
  }
};

bool PgControlChannel::ReplaceControl() {
  // On the slot the borrower lent with the connection (a worker without
  // one of its own borrows only then for the first claim after a quiet
  // spell; a borrower without a slot, on a budget of one or a full server,
  // is waited for, as there is nowhere to go). The new connection first:
  // the old one is given up only once there is one to go on with.
  if (!config_.lent->BorrowerLentSlot()) return false;
  const store::ConnectOptions options = ControlOptions();
  auto conn = store::Connect(config_.dsn, options);
  if (!conn.ok()) {
    if (store::ServerBusy(conn.status())) metrics_.ConnectionRefused();
    log_->warn(
        "group={} session={} a handler keeps the control connection past a "
        "heartbeat, and a new one failed: {}",
        config_.group, session_, std::string(conn.status().message()));
    return false;
  }
  const bool abandoned = config_.lent->Abandon([&] {
    auto orphan = std::make_shared<Orphan>();
    orphan->budget = config_.budget;
    orphan->metrics = &metrics_;
    if (!listen_conn_) {  // else they are on the listen connection
      orphan->session_listener = std::move(session_listener_);
      orphan->listener = std::move(listener_);
    }
    orphan->conn = std::move(conn_);
    return std::shared_ptr<void>(std::move(orphan));
  });
  if (!abandoned) return false;  // given back meanwhile: `conn` closes
  log_->info(
      "group={} session={} a handler keeps the control connection past a "
      "heartbeat; the member goes on with a new one (the old one closes "
      "when the handler is done)",
      config_.group, session_);
  if (!listener_) scheduler_.SetListening(false);
  // The session stays; the new connection listens.
  return UseControl(std::move(*conn), options);
}

void PgControlChannel::LendWhile(int sock, absl::Duration timeout,
                                 bool wake_on_stop) {
  config_.lent->ClearReturned();
  config_.lent->Lend();
  const absl::Time deadline = absl::Now() + timeout;
  // (A stop request stays signaled: while leaving, it cannot wake us.)
  pollfd fds[3] = {{wake_on_stop ? stop_.fd() : -1, POLLIN, 0},
                   {config_.lent->returned_fd(), POLLIN, 0},
                   {sock, POLLIN, 0}};
  while (absl::Now() < deadline) {
    // While a worker has the connection, its own results make the socket
    // readable: then only a stop or its return counts (it dispatches the
    // NOTIFYs it reads), looked at again every few milliseconds in case
    // one came after its last read. A socket readable while nobody
    // borrowed it since before the poll has NOTIFYs.
    const uint64_t borrows = config_.lent->borrows();
    const bool borrowed = config_.lent->Borrowed();
    const int n = borrowed || sock < 0 ? 2 : 3;
    const absl::Duration wait =
        borrowed ? std::min(kBorrowedPoll, deadline - absl::Now())
                 : deadline - absl::Now();
    for (pollfd& fd : fds) fd.revents = 0;
    const int ready = poll(fds, n, PollTimeoutMs(wait));
    if (ready < 0 || fds[0].revents != 0 || fds[1].revents != 0) break;
    if (n == 3 && fds[2].revents != 0 && config_.lent->borrows() == borrows &&
        !config_.lent->Borrowed()) {
      break;
    }
  }
}

void PgControlChannel::LendForDrain(absl::Duration timeout) {
  LendWhile(-1, timeout, /*wake_on_stop=*/false);
}

absl::StatusOr<bool> PgControlChannel::WaitForWork(
    absl::Time until, const KeepAlive& keep_alive, bool may_replace,
    const std::function<bool()>& woken) {
  // Blocks on the connection's socket and the stop request, not on a timer:
  // an idle member's control thread wakes only when something happened or
  // is due. Meanwhile its workers may borrow the control connection.
  while (!woken() && conn_) {
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    if (listener_ && !listen_conn_) {
      // NOTIFYs that came with the results of this thread's own statements
      // are already read, and the socket will not show them.
      const absl::Status read =
          store::AwaitNotifications(*conn_, stop_.fd(), absl::ZeroDuration());
      if (!read.ok()) return read;
      if (woken()) return false;
    }
    absl::Status listened;
    if (listener_ && listen_conn_) {
      // NOTIFYs come on their own connection: the control connection is
      // lent until they do, or a worker gives it back.
      config_.lent->ClearReturned();
      config_.lent->Lend();
      listened = store::AwaitNotifications(*listen_conn_, stop_.fd(), left,
                                           config_.lent->returned_fd());
    } else {
      LendWhile(listener_ ? conn_->sock() : -1, left, /*wake_on_stop=*/true);
    }
    const absl::StatusOr<bool> taken = TakeBack(keep_alive, may_replace);
    if (!taken.ok() || *taken) return taken;
    if (!listener_) continue;
    if (listen_conn_) {
      if (!listened.ok()) StopListening(listened);  // the control is fine
      continue;
    }
    // What arrived on the control connection, or a borrower read.
    const absl::Status read =
        store::AwaitNotifications(*conn_, stop_.fd(), absl::ZeroDuration());
    if (!read.ok()) return read;
  }
  return false;
}

}  // namespace sqlgroup
