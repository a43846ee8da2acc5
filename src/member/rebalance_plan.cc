#include "member/rebalance_plan.h"

#include <algorithm>
#include <set>

namespace sqlgroup {

RebalancePlan PlanRebalance(const std::string& me, const Assignment& assignment,
                            const store::Ownership& ownership,
                            const std::map<int, int64_t>& local,
                            const std::set<int>& revoking) {
  RebalancePlan plan;
  plan.target = assignment.parts_of(me);
  const std::set<int> target(plan.target.begin(), plan.target.end());
  const int parts = static_cast<int>(assignment.owner.size());

  const std::map<int, int64_t>& mine = ownership.mine;
  std::set<int> taken(ownership.others.begin(), ownership.others.end());
  for (const auto& [part, epoch] : mine) taken.insert(part);
  for (const auto& [part, epoch] : local) {
    auto it = mine.find(part);
    if (it == mine.end() || it->second != epoch) plan.lost.push_back(part);
  }
  for (const auto& [part, epoch] : mine) {
    // Parts beyond P (the count shrank) are never targeted: dropped.
    if (!target.count(part) || part >= parts) {
      plan.drop.push_back(part);
    } else {
      auto it = local.find(part);
      if (it == local.end() || it->second != epoch) plan.adopt[part] = epoch;
    }
  }
  for (int part : plan.target) {
    if (!taken.count(part)) plan.take.push_back(part);
  }
  // A lost part no longer runs here: it needs no drain.
  const std::set<int> lost(plan.lost.begin(), plan.lost.end());
  auto runs_here = [&](int part) {
    return local.count(part) > 0 && !lost.count(part);
  };
  for (int part : plan.drop) {
    if (!runs_here(part)) {
      plan.drop_now.push_back(part);
    } else if (!revoking.count(part)) {
      plan.revoke.push_back(part);
    }
  }
  for (int part : revoking) {
    if (target.count(part) && runs_here(part)) plan.unrevoke.push_back(part);
  }
  bool all_owned = true;
  for (int part : plan.target) all_owned &= mine.count(part) > 0;
  plan.converged = all_owned && plan.drop.empty();
  return plan;
}

// Names: "i/INSTANCE" for a static member, "s/ID" for any other ("i/"
// sorts first).
Assignment AssignMembers(const Assignor& assignor, const store::GroupView& view,
                         const std::string& me, int parts) {
  std::map<std::string, std::string> name_of, id_of;
  std::vector<std::string> names;
  for (const std::string& id : view.live_sessions) {
    auto it = view.static_instances.find(id);
    const std::string name =
        it != view.static_instances.end() ? "i/" + it->second : "s/" + id;
    name_of[id] = name;
    id_of[name] = id;
    names.push_back(name);
  }
  std::vector<std::string> current(parts);
  auto owned_by = [&](int part, const std::string& session) {
    auto it = name_of.find(session);
    if (part < parts && it != name_of.end()) current[part] = it->second;
  };
  for (const auto& [part, epoch] : view.ownership.mine) owned_by(part, me);
  for (const auto& [part, owner] : view.ownership.owner_of) {
    owned_by(part, owner);
  }
  const Assignment by_name = assignor.Assign(names, parts, current);
  Assignment a;
  a.sessions = view.live_sessions;
  std::sort(a.sessions.begin(), a.sessions.end());
  a.owner.assign(parts, -1);
  for (int p = 0; p < parts && p < static_cast<int>(by_name.owner.size());
       ++p) {
    if (by_name.owner[p] < 0) continue;
    const std::string& id = id_of.at(by_name.sessions[by_name.owner[p]]);
    a.owner[p] = static_cast<int>(
        std::lower_bound(a.sessions.begin(), a.sessions.end(), id) -
        a.sessions.begin());
  }
  return a;
}

}  // namespace sqlgroup
