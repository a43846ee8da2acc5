// Everything a member counts and measures, in one place: the counters
// behind Consumer::stats() and, when a prometheus::Registry is given, every
// sqlgroup_* metric family (docs/METRICS.md lists them). The member's
// threads report events here; nothing here touches the database.
//
// Thread safety: every method is safe to call from any thread.
#ifndef SQLGROUP_METRICS_H_
#define SQLGROUP_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sqlgroup/consumer.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace sqlgroup {

class MemberMetrics {
 public:
  // `registry` may be null (counters only). `instance` (the member's name)
  // is the `member` label of its series, since Prometheus reserves
  // `instance` for the scrape target; every series carries group=`group`.
  MemberMetrics(prometheus::Registry* registry, std::string group,
                std::string instance);
  ~MemberMetrics();

  // Workers.
  // `carried`: the claim went out with the previous batch's ack.
  void Claimed(int64_t items, absl::Duration took, bool carried = false);
  void Acked(int64_t items, absl::Duration took);
  void Failed();
  void Retried();
  // Released after a serialization failure, deadlock or lock timeout.
  void Conflicted(int64_t items);
  void DeadLettered();
  void LostClaims(int64_t items);
  // The lag of one owned part; `oldest` is the age of its oldest item.
  void PartLag(int part, int64_t items, absl::Duration oldest);
  // Keys of one owned part blocked behind a retry (their head failed and
  // is not due yet), and the age of the oldest such head; 0 and 0 under
  // ordering 'none' or when there is none.
  void PartBlocked(int part, int64_t keys, absl::Duration oldest);
  // Whether this member reports the group's own facts below (one running
  // member does: Rebalancer's GroupReporter); their series go when it
  // stops.
  void ReportsGroup(bool yes);
  // The group's dead letters (how many, the age of the oldest) and pauses
  // (the whole group, how many keys); ignored unless ReportsGroup.
  void GroupFacts(int64_t dead_items, absl::Duration oldest_dead, bool paused,
                  int64_t paused_keys);
  // The topic the group reads ("" for none) and the items published to it
  // so far (-1 unknown); ignored unless ReportsGroup.
  void GroupTopic(const std::string& topic, int64_t published);
  // Dead letters removed because they outlived the group's retention.
  void DeadExpired(int64_t items);

  // Connections (control, worker, listen) opened and closed: the member's
  // connections in use. `budget`: its process's connection budget.
  void ConnectionOpened(const char* kind);
  void ConnectionClosed(const char* kind);
  void ConnectionBudget(int budget);
  // A connection the server refused for now (too many clients, starting
  // or stopping).
  void ConnectionRefused();
  // A worker's task ran on the borrowed control connection.
  void Borrowed();

  // Control thread.
  void Heartbeat(absl::Duration round_trip);
  void SessionLost();
  void Members(int live);
  // The group's part count, as this member last read it.
  void Parts(int parts);
  // Static members away (instance -> when their parts move), as the last
  // membership read showed them; replaces the previous set.
  void StaticAway(const std::map<std::string, absl::Time>& away_until);
  // reason: "join", "leave", "expiry", "lost", "return" or "parts".
  void RebalanceStarted(const std::string& reason);
  // `parts` taken, for the change of target that `reason` started.
  void PartsTaken(int parts, const std::string& reason);
  void RebalanceDone(absl::Duration took);
  // Parts being handed over that still wait for their handler calls (a
  // revoke or a stop); replaces the last count.
  void PartsRevoking(int parts);
  // A part was released `waited` after its revoke began, once every
  // handler call on it had returned.
  void HandoverWaited(absl::Duration waited);
  // `parts` whose handler calls were cut off after drain_timeout.
  void CutOff(int parts);
  // The circuit breaker opened (counted) or closed.
  void CircuitOpen(bool open);
  // The session and parts owned now; replaces the owner series.
  void Owned(const std::string& session, const std::map<int, int64_t>& parts);

  ConsumerStats Snapshot() const;
  // Whether the series are published (a registry was given).
  bool publishes() const { return families_ != nullptr; }
  // Connections held now (ConnectionOpened less ConnectionClosed).
  int64_t connections() const { return connections_.load(); }

 private:
  struct Families;

  const std::string group_;
  const std::string instance_;
  std::unique_ptr<Families> families_;  // null without a registry

  std::atomic<int64_t> claimed_{0}, carried_claims_{0}, acked_{0}, failed_{0},
      dead_{0}, lost_claims_{0}, sessions_lost_{0}, rebalances_{0},
      last_rebalance_us_{0}, connections_{0}, peak_connections_{0},
      connections_refused_{0}, borrowed_{0};

  absl::Mutex mu_;
  // Series that come and go with ownership.
  std::map<int, prometheus::Gauge*> owner_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::pair<prometheus::Gauge*, prometheus::Gauge*>> lag_
      ABSL_GUARDED_BY(mu_);
  std::map<int, std::pair<prometheus::Gauge*, prometheus::Gauge*>> blocked_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Gauge*> away_ ABSL_GUARDED_BY(mu_);
  // GroupFacts' series while this member reports them; none otherwise.
  bool reports_group_ ABSL_GUARDED_BY(mu_) = false;
  struct FactGauges {
    prometheus::Gauge* dead;
    prometheus::Gauge* oldest_dead;
    prometheus::Gauge* paused;
    prometheus::Gauge* paused_keys;
  };
  std::optional<FactGauges> facts_ ABSL_GUARDED_BY(mu_);
  // GroupTopic's series, labelled with the topic: replaced when it changes.
  struct TopicGauges {
    std::string topic;
    prometheus::Gauge* reads;
    prometheus::Gauge* published;  // null while unknown
  };
  std::optional<TopicGauges> topic_ ABSL_GUARDED_BY(mu_);
  void RemoveFacts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveTopic() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  prometheus::Gauge* owned_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string owner_session_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sqlgroup

#endif  // SQLGROUP_METRICS_H_
