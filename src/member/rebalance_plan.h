// What a member must do to move toward its target parts: a pure function of
// the assignment, the owners the database reports and the takes the member
// holds locally. No database, no clock.
#ifndef SQLGROUP_MEMBER_REBALANCE_PLAN_H_
#define SQLGROUP_MEMBER_REBALANCE_PLAN_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sqlgroup/assignor.h"
#include "store/model.h"

namespace sqlgroup {

struct RebalancePlan {
  std::vector<int> target;  // the parts this member should own
  std::vector<int> drop;    // owned (by the database) but not targeted
  std::vector<int> take;    // targeted and free
  std::vector<int> lost;    // held locally but no longer ours (or re-epoched)
  std::map<int, int64_t> adopt;  // ours in the database, unknown locally
  // How each part of `drop` goes: at once when nothing runs it here, else
  // revoked first (its handler calls finish before it is released).
  std::vector<int> drop_now;
  std::vector<int> revoke;  // not revoking yet
  // Revoking, but targeted again and still run here: kept.
  std::vector<int> unrevoke;
  bool converged = false;  // owned == target, nothing to drop or take
};

// The assignment over the live members of `view`, by name: a static member
// is named by its instance, which survives its restarts, any other by its
// session id, so static members come first, in instance order, and a
// restarted one gets its place and, under a sticky assignor, its parts
// back. The assignor also learns who owns each part now (`me` for
// view.ownership.mine). The result names session ids, as PlanRebalance
// needs.
Assignment AssignMembers(const Assignor& assignor, const store::GroupView& view,
                         const std::string& me, int parts);

// `ownership` is what the database says; `local` maps the parts this member
// runs to their epochs; `revoking` (a subset of `local`) are being handed
// over.
RebalancePlan PlanRebalance(const std::string& me, const Assignment& assignment,
                            const store::Ownership& ownership,
                            const std::map<int, int64_t>& local,
                            const std::set<int>& revoking = {});

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_REBALANCE_PLAN_H_
