#include "member/rebalance_plan.h"

#include <set>

namespace sqlgroup {

RebalancePlan PlanRebalance(const std::string& me, const Assignment& assignment,
                            const store::Ownership& ownership,
                            const std::map<int, int64_t>& local) {
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
  bool all_owned = true;
  for (int part : plan.target) all_owned &= mine.count(part) > 0;
  plan.converged = all_owned && plan.drop.empty();
  return plan;
}

}  // namespace sqlgroup
