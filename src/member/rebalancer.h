// What a member runs and hands over. Given the group as just read, it asks
// PlanRebalance (the one decider) what to drop, drain, keep and take, and
// carries that out through the MembershipStore and the PartScheduler (the
// one record of which parts run here). A part being handed over
// (revoking) is released only once no handler call on it runs; after
// drain_timeout its calls are cut off, and it still waits for them to
// return. A change of the group's part count drains every part of the old
// layout before any of the new one is taken.
//
// Thread safety: the control thread only.
#ifndef SQLGROUP_MEMBER_REBALANCER_H_
#define SQLGROUP_MEMBER_REBALANCER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "member/part_scheduler.h"
#include "metrics.h"
#include "sqlgroup/assignor.h"
#include "sqlgroup/consumer.h"
#include "store/membership_store.h"

namespace spdlog {
class logger;
}

namespace sqlgroup {

struct RebalancerConfig {
  std::string group;
  bool use_notify = true;
  // ConsumerOptions::drain_timeout and cut_off.
  absl::Duration drain_timeout;
  std::function<void(const std::string&, const std::vector<int>&)> cut_off;
  RebalanceListener* listener = nullptr;  // optional
};

class Rebalancer {
 public:
  // When the member should read the group again, beyond its usual poll.
  enum class Again { kWhenDue, kSoon, kNow };
  // A part in this member: running (in the scheduler), revoking (no new
  // work; released once no handler call runs), cutting off (revoking past
  // drain_timeout: its calls are cut off, and it still waits for them),
  // or gone (dropped, lost, or never here). Move() is the one transition
  // function, logging "from -> to" at debug level.
  enum class PartState { kGone, kRunning, kRevoking, kCuttingOff };

  Rebalancer(RebalancerConfig config, store::MembershipStore& store,
             PartScheduler& scheduler, MemberMetrics& metrics,
             std::shared_ptr<spdlog::logger> logger);

  // One step toward the target `assignor` gives `session` in `view` (read
  // just now, with `session` live). `keep_alive` runs between statements
  // (a heartbeat when one is due); false stops the pass. The first failed
  // statement ends the pass with its status.
  absl::StatusOr<Again> Rebalance(const std::string& session,
                                  const store::GroupView& view,
                                  const Assignor& assignor, absl::Time now,
                                  const std::function<bool()>& keep_alive);
  // Releases the revoking parts whose handler calls have all returned,
  // and cuts off those of parts that waited drain_timeout. kNow when it
  // released any (see whether the target is complete now).
  absl::StatusOr<Again> FinishDrains(const std::string& session);
  bool draining() const { return !revoking_.empty(); }

  // Why the next target change happens, for its metrics and log lines.
  void NoteJoined(bool replaced_own_instance) {
    returned_ = replaced_own_instance;
  }
  void NoteReaped() { reaped_since_rebalance_ = true; }
  // GroupView::membership at the last rebalance: a heartbeat that reads
  // another one knows the membership changed.
  const std::string& last_membership() const { return last_membership_; }

  // The session is lost: every part is void at once (their calls cut off,
  // OnPartsLost).
  void LoseAll(const std::string& session, const std::string& why);
  // The member stops: revokes every part, marks the busy ones for describe
  // and returns them.
  absl::Status RevokeAll(const std::string& session, absl::Time now,
                         std::vector<int>* marked);
  // Cuts off the calls still running as the member stops.
  void CutOffAll(const std::string& session, bool say);
  // After the calls returned: OnPartsRevoked of every part.
  void FinishLeave(const std::string& session);
  // Unmarks `parts` (a static member stepping away keeps them).
  absl::Status Unmark(const std::string& session,
                      const std::vector<int>& parts);
  // Forgets every part, as when the member stops or fails.
  void Forget(const std::string& session);
  // Updates the ownership metrics.
  void Publish(const std::string& session);
  // Whether this member reports the group's own facts (dead letters,
  // pauses) and removes its expired dead letters: told to the scheduler
  // and the metrics.
  void ReportGroup(bool yes);

 private:
  struct Revoking {
    absl::Time since;
    bool cut_off = false;
  };
  std::string RebalanceReason(const store::GroupView& view) const;
  absl::StatusOr<Again> ChangeLayout(const std::string& session,
                                     const store::GroupView& view,
                                     int new_parts, absl::Time now,
                                     const std::function<bool()>& keep_alive);
  // FinishDrains: the parts it released.
  absl::StatusOr<std::vector<int>> Drain(const std::string& session);
  // Takes `parts`; returns those taken with their epochs.
  absl::StatusOr<std::map<int, int64_t>> Take(const std::string& session,
                                              const std::vector<int>& parts);
  // Moves `parts` to `to` (recording revokes in revoking_), and logs it.
  // Call before the scheduler learns of it (Add, Revoke, Remove).
  void Move(const std::string& session, const std::vector<int>& parts,
            PartState to, absl::Time now);
  // Revokes every running part not revoking yet; returns them.
  std::vector<int> RevokeRunning(const std::string& session, absl::Time now);
  // Marks for describe that `parts` are (not) being handed over. Only
  // describe reads it: only a broken connection is returned.
  absl::Status MarkRevoking(const std::string& session,
                            const std::vector<int>& parts, bool revoking);
  void CutOff(const std::string& session, const std::vector<int>& parts,
              const char* why, bool say);
  std::vector<int> BusyOf(const std::vector<int>& parts) const;
  // The sessions the last assignment gives `parts` to, `session` excluded.
  std::vector<std::string> TargetsOf(const std::string& session,
                                     const std::vector<int>& parts) const;
  void CallListener(
      const std::string& session, const char* name,
      void (RebalanceListener::*callback)(const std::vector<int>&),
      const std::vector<int>& parts);
  std::set<int> RevokingParts() const;

  const RebalancerConfig config_;
  store::MembershipStore& store_;
  PartScheduler& scheduler_;
  MemberMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;

  // The part count the running parts are numbered under: the group's,
  // except while a change of it drains them (ChangeLayout).
  int layout_parts_ = 0;
  int group_parts_ = 0;    // as last read
  bool resizing_ = false;  // a part-count change since the last target
  std::map<int, Revoking> revoking_;
  Assignment assignment_;  // of the last membership read
  std::vector<int> last_target_;
  std::vector<std::string> last_live_;  // sessions at the last rebalance
  std::string last_membership_;         // GroupView::membership, the same
  std::map<std::string, std::string> last_static_;
  bool reaped_since_rebalance_ = false;
  bool rejoined_after_loss_ = false;
  // This session took the place of its instance's earlier one (static).
  bool returned_ = false;
  // Why the target last changed: the label of the takes that follow.
  // "join" until the first change: a new member's own join.
  std::string rebalance_reason_ = "join";
  std::optional<absl::Time> rebalance_started_;
};

const char* PartStateName(Rebalancer::PartState state);

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_REBALANCER_H_
