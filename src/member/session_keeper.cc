#include "member/session_keeper.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "spdlog/spdlog.h"
#include "store/connection.h"

namespace sqlgroup {

SessionKeeper::SessionKeeper(SessionKeeperConfig config,
                             store::MembershipStore& store,
                             MemberMetrics& metrics,
                             std::shared_ptr<spdlog::logger> logger)
    : config_(std::move(config)),
      store_(store),
      metrics_(metrics),
      log_(std::move(logger)) {}

void SessionKeeper::Started(const std::string& session,
                            const store::GroupSettings& settings) {
  session_ = session;
  settings_ = settings;
  const absl::Time now = absl::Now();
  last_ok_ = now;
  next_heartbeat_ =
      config_.shared_heartbeat
          ? config_.shared_heartbeat->NextSlot(now, settings_.heartbeat)
          : now + settings_.heartbeat;
  next_watch_ = next_heartbeat_;  // the first heartbeat sets the reap timer
}

absl::StatusOr<std::optional<SessionKeeper::Answer>>
SessionKeeper::Heartbeat() {
  const absl::Time start = absl::Now();
  const bool shared = config_.shared_heartbeat != nullptr;
  const bool watch = shared || start >= next_watch_;
  auto beat = Send(watch);
  if (!beat.ok()) {
    next_heartbeat_ = absl::Now() + settings_.heartbeat / 4;
    return beat.status();
  }
  if (!beat->has_value()) return std::nullopt;
  const store::Beat& b = **beat;
  settings_ = b.settings;
  last_ok_ = start;
  metrics_.Heartbeat(absl::Now() - start);
  // Shared: on the process's grid, where the other members ask too.
  next_heartbeat_ =
      shared ? config_.shared_heartbeat->NextSlot(start, settings_.heartbeat)
             : start + settings_.heartbeat;
  Answer answer{.settings = b.settings};
  if (!watch) return answer;
  // Watch again with the first heartbeat after the next other member would
  // expire (a little past, so the server's clock agrees): then it has
  // either heartbeated, and the timer moves on, or it is reaped right then.
  // A TTL at the latest, so the fingerprint is read even while alone.
  // Waiting for our own heartbeat delays a reap by at most one interval
  // (with many members, the first watcher's is soon), and sends no extra
  // statement.
  // Counted from the reply, not the request: the server measured the
  // expiry in between, so the timer cannot fire before it.
  const absl::Time now = absl::Now();
  // Shared: only the member told of the next expiry reaps, not every
  // member of the process (all of them see the same change).
  may_reap_ = !shared || b.next_expiry != absl::InfiniteDuration();
  if (b.next_expiry <= absl::ZeroDuration()) reap_due_ = true;
  next_watch_ = now + settings_.ttl;
  if (b.next_expiry != absl::InfiniteDuration()) {
    next_watch_ = std::min(next_watch_,
                           now + std::max(b.next_expiry, absl::ZeroDuration()) +
                               absl::Milliseconds(5));
  }
  answer.membership = b.membership;
  return answer;
}

bool SessionKeeper::DrainBeatDue(absl::Time now) {
  if (session_.empty() || now < next_heartbeat_) return false;
  // One try per interval, also when it fails: a database that is down is
  // not asked every few milliseconds.
  next_heartbeat_ = now + settings_.heartbeat;
  return true;
}

absl::StatusOr<std::vector<std::string>> SessionKeeper::Reap() {
  reap_due_ = false;
  log_->debug("group={} session={} reaping expired sessions", config_.group,
              session_);
  next_watch_ = next_heartbeat_;  // which sets the timer again
  // Stop at the next heartbeat: several reaps blocked by zombies' locks
  // must not cost this member its own session. Nobody expired after all
  // (a late heartbeat): the next heartbeat of ours sets the timer again.
  return store_.ReapExpired(config_.group, config_.use_notify, next_heartbeat_);
}

absl::StatusOr<std::optional<store::Beat>> SessionKeeper::Send(bool watch) {
  if (config_.shared_heartbeat) {
    auto beat = SharedBeat();
    if (beat.ok() || !(absl::IsUnavailable(beat.status()) ||
                       absl::IsDeadlineExceeded(beat.status()))) {
      return beat;
    }
    // The shared connection is down or slow, not necessarily this one: a
    // member's session must not depend on a connection it does not own.
    log_->warn(
        "group={} session={} shared heartbeat failed ({}); "
        "heartbeating on the control connection",
        config_.group, session_, std::string(beat.status().message()));
    watch = true;
  }
  return store_.Heartbeat(session_, watch);
}

absl::StatusOr<std::optional<store::Beat>> SessionKeeper::SharedBeat() {
  // Behind a statement in flight, then its own.
  return config_.shared_heartbeat->Beat(
      config_.group, session_,
      absl::Now() + HeartbeatBatcher::kGather +
          2 * store::CoordinationBound(settings_.ttl));
}

absl::Time SessionKeeper::ReplaceControlAt() const {
  const absl::Time now = absl::Now();
  // Once a heartbeat is late by an interval: a handler of a few hundred
  // milliseconds costs no new connection. But a TTL may be as short as
  // two intervals: never later than one before it ends. After an attempt
  // that failed, again a quarter of an interval later.
  const absl::Time at =
      std::min(std::max(next_heartbeat_, now) + settings_.heartbeat,
               last_ok_ + settings_.ttl - settings_.heartbeat);
  return std::max(at, now + settings_.heartbeat / 4);
}

void SessionKeeper::BeatWhileHeld() {
  if (!config_.shared_heartbeat || session_.empty()) return;
  // Not Send: its fallback is the control connection, which the worker
  // has.
  auto beat = SharedBeat();
  if (beat.ok() && beat->has_value()) {
    last_ok_ = absl::Now();
    next_heartbeat_ = last_ok_ + settings_.heartbeat;
  }
}

}  // namespace sqlgroup
