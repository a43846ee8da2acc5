// Keeps a member's session alive once it is registered: when each
// heartbeat is due and over which connection (the process's shared
// heartbeat, else the control connection), when a heartbeat is a watched
// one (it also reads when the next other member expires, and the
// membership's fingerprint), and when the group's expired sessions are to
// be reaped. The member loop decides what a heartbeat's answer means.
//
// Thread safety: the control thread only.
#ifndef SQLGROUP_MEMBER_SESSION_KEEPER_H_
#define SQLGROUP_MEMBER_SESSION_KEEPER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "member/heartbeat_batcher.h"
#include "metrics.h"
#include "store/membership_store.h"

namespace spdlog {
class logger;
}

namespace sqlgroup {

struct SessionKeeperConfig {
  std::string group;
  bool use_notify = true;
  // Heartbeats go through it, with those of the process's other members,
  // instead of over the control connection. Optional.
  std::shared_ptr<HeartbeatBatcher> shared_heartbeat;
};

class SessionKeeper {
 public:
  SessionKeeper(SessionKeeperConfig config, store::MembershipStore& store,
                MemberMetrics& metrics, std::shared_ptr<spdlog::logger> logger);

  // `session` was registered just now, under `settings`.
  void Started(const std::string& session,
               const store::GroupSettings& settings);
  // The session is gone (lost, or the member left).
  void Ended() { session_.clear(); }
  // The group's settings as last read (the TTL and interval may change).
  void Follow(const store::GroupSettings& settings) { settings_ = settings; }

  absl::Time next_heartbeat() const { return next_heartbeat_; }
  // A heartbeat got through within the TTL: the session may still live.
  bool Fresh(absl::Time now) const { return now - last_ok_ <= settings_.ttl; }

  struct Answer {
    // The group's current settings.
    store::GroupSettings settings;
    // From a watched heartbeat: the live members' fingerprint
    // (GroupView::membership); a change nobody announced shows here.
    std::optional<std::string> membership;
  };
  // One heartbeat, watched when due. nullopt: the session expired or was
  // reaped. A failure tries again a quarter interval later.
  absl::StatusOr<std::optional<Answer>> Heartbeat();
  // One unwatched heartbeat per interval, also when it fails, while the
  // member waits for its handler calls to return as it stops (in-flight
  // acks are fenced on the session being alive). False when none is due.
  bool DrainBeatDue(absl::Time now);
  absl::StatusOr<std::optional<store::Beat>> DrainBeat() {
    return Send(/*watch=*/false);
  }

  // Whether the group's expired sessions should be reaped now.
  bool reap_due() const { return reap_due_; }
  // A membership read showed expired sessions.
  void SawExpired() {
    if (may_reap_) reap_due_ = true;
  }
  // Deletes the group's expired sessions until the next heartbeat is due,
  // and returns their ids.
  absl::StatusOr<std::vector<std::string>> Reap();

  // When the control thread stops waiting for a worker that borrowed the
  // control connection and opens another: a heartbeat interval late, but
  // a heartbeat's time before the session would expire.
  absl::Time ReplaceControlAt() const;
  // Without a connection to heartbeat on: through the shared heartbeat,
  // when the member has one (it needs no connection of the member's).
  void BeatWhileHeld();

 private:
  // Over the shared heartbeat if there is one (then always a watched
  // one), else over the control connection.
  absl::StatusOr<std::optional<store::Beat>> Send(bool watch);
  absl::StatusOr<std::optional<store::Beat>> SharedBeat();

  const SessionKeeperConfig config_;
  store::MembershipStore& store_;
  MemberMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;

  std::string session_;
  store::GroupSettings settings_;
  absl::Time last_ok_;
  absl::Time next_heartbeat_ = absl::InfiniteFuture();
  // From when our heartbeats are watched ones: when the next other member
  // expires unless it heartbeats (the last watched heartbeat read it), a
  // TTL at the latest.
  absl::Time next_watch_ = absl::InfiniteFuture();
  bool reap_due_ = false;  // a watched heartbeat or a view saw an expiry
  // Whether a view that shows expired sessions makes this member reap:
  // always, unless the heartbeat is shared and its last reply named another
  // member of the process as the one to reap.
  bool may_reap_ = true;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_SESSION_KEEPER_H_
