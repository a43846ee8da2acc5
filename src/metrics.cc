#include "metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/strings/str_cat.h"
#include "metrics_families.h"
#include "sqlgroup/version.h"

namespace sqlgroup {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// Latencies from 0.5 ms to 10 s; rebalances from 10 ms to 2 min.
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* const kBuckets = new Histogram::BucketBoundaries{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,  0.5,    1,     2.5,  5,     10};
  return *kBuckets;
}
const Histogram::BucketBoundaries& RebalanceBuckets() {
  static const auto* const kBuckets = new Histogram::BucketBoundaries{
      0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  return *kBuckets;
}

}  // namespace

MemberMetrics::MemberMetrics(prometheus::Registry* registry, std::string group,
                             std::string instance)
    : group_(std::move(group)), instance_(std::move(instance)) {
  if (registry == nullptr) return;
  families_ = std::make_unique<Families>(*registry);
  Families& f = *families_;
  const prometheus::Labels base = {{"group", group_}, {"member", instance_}};
  auto with = [&](const char* outcome) {
    prometheus::Labels l = base;
    l["outcome"] = outcome;
    return l;
  };
  // One series per process (every member adds the same one), kept when a
  // member goes.
  f.build_info
      .Add({{"version", kVersion},
            {"schema", absl::StrCat(kSchemaVersion)},
            {"oldest_schema", absl::StrCat(kOldestServedSchema)}})
      .Set(1);
  f.members_gauge = &f.members.Add(base);
  f.parts_gauge = &f.group_parts.Add(base);
  f.away_gauge = &f.static_away.Add(base);
  f.claimed = &f.items.Add(with("claimed"));
  f.acked = &f.items.Add(with("acked"));
  f.failed = &f.items.Add(with("failed"));
  f.retried = &f.items.Add(with("retried"));
  f.dead = &f.items.Add(with("dead_lettered"));
  f.lost = &f.items.Add(with("lost_claim"));
  f.conflict = &f.items.Add(with("conflict"));
  f.sessions_lost_counter = &f.sessions_lost.Add(base);
  f.rebalance = &f.rebalance_seconds.Add(base, RebalanceBuckets());
  f.revoking = &f.parts_revoking.Add(base);
  f.handover = &f.handover_wait_seconds.Add(base, RebalanceBuckets());
  f.cutoff = &f.cutoffs.Add(base);
  f.circuit = &f.circuit_open.Add(base);
  f.trips = &f.circuit_trips.Add(base);
  f.heartbeat = &f.heartbeat_seconds.Add(base, LatencyBuckets());
  f.claim = &f.claim_seconds.Add(base, LatencyBuckets());
  f.carried = &f.carried_claims.Add(base);
  f.ack = &f.ack_seconds.Add(base, LatencyBuckets());
  for (const char* kind : {"control", "worker", "listen"}) {
    prometheus::Labels l = base;
    l["kind"] = kind;
    f.connections_by_kind[kind] = &f.connections.Add(l);
  }
  f.budget = &f.connection_budget.Add(base);
  f.refused = &f.connections_refused.Add(base);
  f.borrowed = &f.borrowed_tasks.Add(base);
  f.expired = &f.dead_expired.Add(base);
  for (const char* reason :
       {"join", "leave", "expiry", "lost", "return", "parts"}) {
    prometheus::Labels l = base;
    l["reason"] = reason;
    f.rebalances.Add(l);  // present from the start, at 0
    f.parts_taken.Add(l);
  }
}

MemberMetrics::~MemberMetrics() {
  if (!families_) return;
  // The registry outlives us; take our series out of later scrapes.
  absl::MutexLock lock(&mu_);
  Families& f = *families_;
  for (auto& [part, g] : owner_) f.part_owner.Remove(g);
  for (auto& [part, g] : lag_) {
    f.lag_items.Remove(g.first);
    f.lag_age.Remove(g.second);
  }
  for (auto& [part, g] : blocked_) {
    f.blocked_keys.Remove(g.first);
    f.blocked_age.Remove(g.second);
  }
  if (owned_ != nullptr) f.owned_parts.Remove(owned_);
  for (auto& [name, g] : away_) f.static_away_until.Remove(g);
  RemoveFacts();
  RemoveTopic();
}

void MemberMetrics::Claimed(int64_t items, absl::Duration took, bool carried) {
  claimed_ += items;
  if (carried) ++carried_claims_;
  if (!families_) return;
  families_->claimed->Increment(static_cast<double>(items));
  if (carried) families_->carried->Increment();
  families_->claim->Observe(absl::ToDoubleSeconds(took));
}

void MemberMetrics::Acked(int64_t items, absl::Duration took) {
  acked_ += items;
  if (!families_) return;
  families_->acked->Increment(static_cast<double>(items));
  families_->ack->Observe(absl::ToDoubleSeconds(took));
}

void MemberMetrics::Failed() {
  ++failed_;
  if (families_) families_->failed->Increment();
}

void MemberMetrics::Retried() {
  if (families_) families_->retried->Increment();
}

void MemberMetrics::Conflicted(int64_t items) {
  if (families_) families_->conflict->Increment(static_cast<double>(items));
}

void MemberMetrics::DeadLettered() {
  ++dead_;
  if (families_) families_->dead->Increment();
}

void MemberMetrics::LostClaims(int64_t items) {
  lost_claims_ += items;
  if (families_) families_->lost->Increment(static_cast<double>(items));
}

void MemberMetrics::PartLag(int part, int64_t items, absl::Duration oldest) {
  if (!families_) return;
  absl::MutexLock lock(&mu_);
  auto it = lag_.find(part);
  if (it == lag_.end()) {
    if (!owner_.count(part)) return;  // dropped meanwhile
    // Labelled by member too: two consumers in one process may share a
    // registry, and a series one of them removes must not be the other's.
    const prometheus::Labels l = {
        {"group", group_}, {"part", absl::StrCat(part)}, {"member", instance_}};
    it = lag_.emplace(part, std::make_pair(&families_->lag_items.Add(l),
                                           &families_->lag_age.Add(l)))
             .first;
  }
  it->second.first->Set(static_cast<double>(items));
  it->second.second->Set(absl::ToDoubleSeconds(oldest));
}

void MemberMetrics::PartBlocked(int part, int64_t keys, absl::Duration oldest) {
  if (!families_) return;
  absl::MutexLock lock(&mu_);
  auto it = blocked_.find(part);
  if (it == blocked_.end()) {
    if (!owner_.count(part)) return;  // dropped meanwhile
    // Labelled as the lag is (see PartLag).
    const prometheus::Labels l = {
        {"group", group_}, {"part", absl::StrCat(part)}, {"member", instance_}};
    it = blocked_
             .emplace(part, std::make_pair(&families_->blocked_keys.Add(l),
                                           &families_->blocked_age.Add(l)))
             .first;
  }
  it->second.first->Set(static_cast<double>(keys));
  it->second.second->Set(absl::ToDoubleSeconds(oldest));
}

void MemberMetrics::GroupFacts(int64_t dead_items, absl::Duration oldest_dead,
                               bool paused, int64_t paused_keys) {
  if (!families_) return;
  Families& f = *families_;
  absl::MutexLock lock(&mu_);
  if (!facts_) {
    if (!reports_group_) return;  // another member reports them now
    const prometheus::Labels l = {{"group", group_}, {"member", instance_}};
    facts_ = FactGauges{&f.dead_items.Add(l), &f.dead_age.Add(l),
                        &f.group_paused.Add(l), &f.paused_keys.Add(l)};
  }
  facts_->dead->Set(static_cast<double>(dead_items));
  facts_->oldest_dead->Set(absl::ToDoubleSeconds(oldest_dead));
  facts_->paused->Set(paused ? 1 : 0);
  facts_->paused_keys->Set(static_cast<double>(paused_keys));
}

void MemberMetrics::GroupTopic(const std::string& topic, int64_t published) {
  if (!families_) return;
  Families& f = *families_;
  absl::MutexLock lock(&mu_);
  if (topic_ && (topic_->topic != topic || !reports_group_)) RemoveTopic();
  if (topic.empty() || !reports_group_) return;
  const prometheus::Labels l = {
      {"group", group_}, {"member", instance_}, {"topic", topic}};
  if (!topic_) topic_ = TopicGauges{topic, &f.group_topic.Add(l), nullptr};
  topic_->reads->Set(1);
  if (published < 0) {  // unknown now: no stale count
    if (topic_->published) f.topic_published.Remove(topic_->published);
    topic_->published = nullptr;
    return;
  }
  if (!topic_->published) topic_->published = &f.topic_published.Add(l);
  topic_->published->Set(static_cast<double>(published));
}

void MemberMetrics::RemoveTopic() {
  if (!topic_) return;
  families_->group_topic.Remove(topic_->reads);
  if (topic_->published) families_->topic_published.Remove(topic_->published);
  topic_.reset();
}

void MemberMetrics::ReportsGroup(bool yes) {
  if (!families_) return;
  absl::MutexLock lock(&mu_);
  reports_group_ = yes;
  if (!yes) {
    RemoveFacts();
    RemoveTopic();
  }
}

void MemberMetrics::RemoveFacts() {
  if (!facts_) return;
  Families& f = *families_;
  f.dead_items.Remove(facts_->dead);
  f.dead_age.Remove(facts_->oldest_dead);
  f.group_paused.Remove(facts_->paused);
  f.paused_keys.Remove(facts_->paused_keys);
  facts_.reset();
}

void MemberMetrics::DeadExpired(int64_t items) {
  if (families_) families_->expired->Increment(static_cast<double>(items));
}

void MemberMetrics::Heartbeat(absl::Duration round_trip) {
  if (families_) {
    families_->heartbeat->Observe(absl::ToDoubleSeconds(round_trip));
  }
}

void MemberMetrics::ConnectionOpened(const char* kind) {
  const int64_t now = ++connections_;
  int64_t peak = peak_connections_.load();
  while (now > peak && !peak_connections_.compare_exchange_weak(peak, now)) {
  }
  if (families_) families_->connections_by_kind.at(kind)->Increment();
}

void MemberMetrics::ConnectionClosed(const char* kind) {
  --connections_;
  if (families_) families_->connections_by_kind.at(kind)->Decrement();
}

void MemberMetrics::ConnectionBudget(int budget) {
  if (families_) families_->budget->Set(budget);
}

void MemberMetrics::ConnectionRefused() {
  ++connections_refused_;
  if (families_) families_->refused->Increment();
}

void MemberMetrics::Borrowed() {
  ++borrowed_;
  if (families_) families_->borrowed->Increment();
}

void MemberMetrics::SessionLost() {
  ++sessions_lost_;
  if (families_) families_->sessions_lost_counter->Increment();
}

void MemberMetrics::Members(int live) {
  if (families_) families_->members_gauge->Set(live);
}

void MemberMetrics::Parts(int parts) {
  if (families_) families_->parts_gauge->Set(parts);
}

void MemberMetrics::StaticAway(
    const std::map<std::string, absl::Time>& away_until) {
  if (!families_) return;
  Families& f = *families_;
  absl::MutexLock lock(&mu_);
  f.away_gauge->Set(static_cast<double>(away_until.size()));
  for (auto it = away_.begin(); it != away_.end();) {
    if (away_until.count(it->first)) {
      ++it;
    } else {
      f.static_away_until.Remove(it->second);
      it = away_.erase(it);
    }
  }
  for (const auto& [name, until] : away_until) {
    auto it = away_.find(name);
    if (it == away_.end()) {
      it = away_
               .emplace(name,
                        &f.static_away_until.Add({{"group", group_},
                                                  {"member", instance_},
                                                  {"static_member", name}}))
               .first;
    }
    it->second->Set(absl::ToDoubleSeconds(until - absl::UnixEpoch()));
  }
}

void MemberMetrics::RebalanceStarted(const std::string& reason) {
  ++rebalances_;
  if (!families_) return;
  families_->rebalances
      .Add({{"group", group_}, {"member", instance_}, {"reason", reason}})
      .Increment();
}

void MemberMetrics::PartsTaken(int parts, const std::string& reason) {
  if (!families_) return;
  families_->parts_taken
      .Add({{"group", group_}, {"member", instance_}, {"reason", reason}})
      .Increment(parts);
}

void MemberMetrics::RebalanceDone(absl::Duration took) {
  last_rebalance_us_ = absl::ToInt64Microseconds(took);
  if (families_) families_->rebalance->Observe(absl::ToDoubleSeconds(took));
}

void MemberMetrics::PartsRevoking(int parts) {
  if (families_) families_->revoking->Set(parts);
}

void MemberMetrics::HandoverWaited(absl::Duration waited) {
  if (families_) families_->handover->Observe(absl::ToDoubleSeconds(waited));
}

void MemberMetrics::CutOff(int parts) {
  if (families_) families_->cutoff->Increment(parts);
}

void MemberMetrics::CircuitOpen(bool open) {
  if (!families_) return;
  families_->circuit->Set(open ? 1 : 0);
  if (open) families_->trips->Increment();
}

void MemberMetrics::Owned(const std::string& session,
                          const std::map<int, int64_t>& parts) {
  if (!families_) return;
  Families& f = *families_;
  absl::MutexLock lock(&mu_);
  if (session != owner_session_) {
    // A new session relabels everything it owns.
    if (owned_ != nullptr) f.owned_parts.Remove(owned_);
    owned_ = nullptr;
    for (auto& [part, g] : owner_) f.part_owner.Remove(g);
    owner_.clear();
    owner_session_ = session;
    if (!session.empty()) {
      owned_ = &f.owned_parts.Add(
          {{"group", group_}, {"member", instance_}, {"session", session}});
    }
  }
  if (owned_ != nullptr) owned_->Set(static_cast<double>(parts.size()));
  for (auto it = owner_.begin(); it != owner_.end();) {
    if (parts.count(it->first)) {
      ++it;
    } else {
      f.part_owner.Remove(it->second);
      it = owner_.erase(it);
    }
  }
  for (const auto& [part, epoch] : parts) {
    if (owner_.count(part)) continue;
    Gauge& g = f.part_owner.Add({{"group", group_},
                                 {"part", absl::StrCat(part)},
                                 {"member", instance_},
                                 {"session", session}});
    g.Set(1);
    owner_[part] = &g;
  }
  for (auto it = lag_.begin(); it != lag_.end();) {
    if (parts.count(it->first)) {
      ++it;
      continue;
    }
    f.lag_items.Remove(it->second.first);
    f.lag_age.Remove(it->second.second);
    it = lag_.erase(it);
  }
  for (auto it = blocked_.begin(); it != blocked_.end();) {
    if (parts.count(it->first)) {
      ++it;
      continue;
    }
    f.blocked_keys.Remove(it->second.first);
    f.blocked_age.Remove(it->second.second);
    it = blocked_.erase(it);
  }
}

ConsumerStats MemberMetrics::Snapshot() const {
  ConsumerStats s;
  s.claimed = claimed_.load();
  s.carried_claims = carried_claims_.load();
  s.acked = acked_.load();
  s.failed = failed_.load();
  s.dead_lettered = dead_.load();
  s.lost_claims = lost_claims_.load();
  s.sessions_lost = sessions_lost_.load();
  s.rebalances = rebalances_.load();
  s.last_rebalance = absl::Microseconds(last_rebalance_us_.load());
  s.connections = connections_.load();
  s.peak_connections = peak_connections_.load();
  s.connections_refused = connections_refused_.load();
  s.borrowed_tasks = borrowed_.load();
  return s;
}

}  // namespace sqlgroup
