#include "member/heartbeat_batcher.h"

#include <algorithm>
#include <pqxx/pqxx>
#include <set>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "member/backoff.h"
#include "pooler_found.h"
#include "store/connection.h"

namespace sqlgroup {

absl::StatusOr<std::shared_ptr<SharedHeartbeat>> SharedHeartbeat::Create(
    SharedHeartbeatOptions options) {
  if (options.connect_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError(
        "SharedHeartbeatOptions.connect_timeout must be >= 1s");
  }
  // Its connection's slot, for its whole life.
  if (options.connection_budget && !options.connection_budget->Reserve()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the connection budget of ", options.connection_budget->limit(),
        " has no slot left for the shared heartbeat's connection"));
  }
  // Only to check the connection string now, where the caller can act on
  // the error: the sending thread connects with its own settings.
  store::ConnectOptions connect;
  connect.connect_timeout = options.connect_timeout;
  connect.application_name = "sqlgroup-heartbeat";
  store::SetPoolMode(connect, options.pool_mode);
  auto conn = store::Connect(options.dsn, connect);
  if (!conn.ok()) {
    if (options.connection_budget) options.connection_budget->Unreserve();
    return conn.status();
  }
  options.pool_mode =
      internal::Resolved(options.pool_mode, store::TransactionPooled(**conn));
  conn->reset();
  return std::make_shared<HeartbeatBatcher>(std::move(options));
}

HeartbeatBatcher::HeartbeatBatcher(SharedHeartbeatOptions options)
    : options_(std::move(options)),
      // Each process on its own grid: a fleet of them does not heartbeat
      // in the same instant.
      phase_(absl::Nanoseconds(absl::Uniform<int64_t>(
          absl::BitGen(), 0, absl::ToInt64Nanoseconds(absl::Hours(1))))) {
  thread_ = std::thread([this] { Run(); });
}

HeartbeatBatcher::~HeartbeatBatcher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
  if (options_.connection_budget) options_.connection_budget->Unreserve();
}

SharedHeartbeatStats HeartbeatBatcher::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void HeartbeatBatcher::Attach(absl::Duration ttl) {
  absl::MutexLock lock(&mu_);
  ttls_.insert(ttl);
}

void HeartbeatBatcher::Detach(absl::Duration ttl) {
  absl::MutexLock lock(&mu_);
  auto it = ttls_.find(ttl);
  if (it != ttls_.end()) ttls_.erase(it);
}

absl::Time HeartbeatBatcher::NextSlot(absl::Time t, absl::Duration interval,
                                      absl::Duration phase) {
  const int64_t step = std::max<int64_t>(1, absl::ToInt64Nanoseconds(interval));
  const int64_t shift = absl::ToInt64Nanoseconds(phase) % step;
  const int64_t now = absl::ToUnixNanos(t) - shift;
  return absl::FromUnixNanos((now / step + 1) * step + shift);
}

absl::Time HeartbeatBatcher::NextSlot(absl::Time t,
                                      absl::Duration interval) const {
  return NextSlot(t, interval, phase_);
}

bool HeartbeatBatcher::BatchReady() const {
  return stop_ || pending_.size() >= ttls_.size();
}

absl::StatusOr<std::optional<store::Beat>> HeartbeatBatcher::Beat(
    const std::string& group, const std::string& session, absl::Time deadline) {
  auto request = std::make_shared<Request>();
  request->group = group;
  request->session = session;
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::UnavailableError("shared heartbeat stopped");
  if (pending_.empty()) first_pending_ = absl::Now();
  pending_.push_back(request);
  if (!mu_.AwaitWithDeadline(absl::Condition(&request->done), deadline)) {
    // Not sent yet: it never will be (the member heartbeats otherwise, or
    // has given up on the session), and it must not count as asked.
    pending_.erase(std::remove(pending_.begin(), pending_.end(), request),
                   pending_.end());
    return absl::DeadlineExceededError(
        "shared heartbeat: no reply in time (the statement or the "
        "connection is slow)");
  }
  return request->result;
}

void HeartbeatBatcher::Run() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(
        +[](HeartbeatBatcher* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(b->mu_) {
          return b->stop_ || !b->pending_.empty();
        },
        this));
    if (stop_) break;
    // Members on the same grid ask within a few milliseconds of each other.
    mu_.AwaitWithDeadline(absl::Condition(this, &HeartbeatBatcher::BatchReady),
                          first_pending_ + kGather);
    if (stop_) break;
    if (pending_.empty()) continue;  // every request was withdrawn
    Batch batch;
    batch.swap(pending_);
    mu_.Unlock();
    Send(batch);
    mu_.Lock();
    for (const auto& request : batch) request->done = true;
  }
  for (const auto& request : pending_) {
    request->result = absl::UnavailableError("shared heartbeat stopped");
    request->done = true;
  }
  pending_.clear();
}

bool HeartbeatBatcher::EnsureConnected(absl::Status* why) {
  std::optional<absl::Duration> ttl;
  {
    absl::MutexLock lock(&mu_);
    if (!ttls_.empty()) ttl = *ttls_.begin();
  }
  if (conn_) {
    // Statements are bounded by the shortest TTL attached now: a member
    // that joins with a shorter one, the last with the shortest leaving, or
    // a group's TTL altered set new bounds on the same connection. (No
    // one attached: a request whose member has just left; any bound will
    // do for it.)
    if (!ttl) return true;
    const absl::StatusOr<bool> set = timeouts_.Follow(*conn_, Options(*ttl));
    if (set.ok()) return true;
    conn_.reset();
    *why = absl::UnavailableError(
        absl::StrCat("shared heartbeat: ", set.status().message()));
    return false;
  }
  if (!ttl) {
    *why = absl::UnavailableError("shared heartbeat: no member is attached");
    return false;
  }
  const absl::Time now = absl::Now();
  if (now < next_connect_) {
    *why = last_connect_error_;
    return false;
  }
  const store::ConnectOptions options = Options(*ttl);
  auto conn = store::Connect(options_.dsn, options);
  if (!conn.ok()) {
    ++connect_failures_;
    next_connect_ = now + Backoff(connect_failures_, absl::Milliseconds(100),
                                  absl::Seconds(2));
    last_connect_error_ = absl::UnavailableError(
        absl::StrCat("shared heartbeat: ", conn.status().message()));
    *why = last_connect_error_;
    return false;
  }
  conn_ = std::move(*conn);
  timeouts_ = store::ConnectionTimeouts(options);
  store::PrepareMemberStatements(*conn_);
  connect_failures_ = 0;
  return true;
}

store::ConnectOptions HeartbeatBatcher::Options(absl::Duration ttl) const {
  // As on a member's control connection.
  store::ConnectOptions options = store::CoordinationOptions(
      "sqlgroup-heartbeat", ttl, options_.connect_timeout);
  options.transaction_pooler = options_.pool_mode == PoolMode::kTransaction;
  return options;
}

void HeartbeatBatcher::Send(const Batch& batch) {
  auto fail = [&](const absl::Status& s) {
    for (const auto& request : batch) request->result = s;
    absl::MutexLock lock(&mu_);
    ++stats_.failures;
  };
  absl::Status why;
  if (!EnsureConnected(&why)) {
    fail(why);
    return;
  }
  std::vector<std::string> sessions;
  for (const auto& request : batch) sessions.push_back(request->session);
  std::sort(sessions.begin(), sessions.end());
  sessions.erase(std::unique(sessions.begin(), sessions.end()), sessions.end());
  auto beats = store::HeartbeatMany(*conn_, sessions);
  if (!beats.ok()) {
    if (absl::IsUnavailable(beats.status()) ||
        absl::IsUnknown(beats.status())) {
      conn_.reset();
    }
    fail(beats.status());
    return;
  }
  std::set<std::string> told;  // groups whose reaper this batch named
  int64_t refreshed = 0;
  for (const auto& request : batch) {
    auto it = beats->find(request->session);
    if (it == beats->end()) {
      request->result = std::optional<store::Beat>();
      continue;
    }
    ++refreshed;
    store::Beat beat = it->second;
    if (!told.insert(request->group).second) {
      beat.next_expiry = absl::InfiniteDuration();
    }
    request->result = std::optional<store::Beat>(std::move(beat));
  }
  absl::MutexLock lock(&mu_);
  ++stats_.statements;
  stats_.beats += refreshed;
}

}  // namespace sqlgroup
