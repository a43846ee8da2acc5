#include "rebalance.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <pqxx/pqxx>
#include <random>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common.h"
#include "keyspace.h"
#include "member/rebalance_plan.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/assignor.h"
#include "store/member_store.h"

namespace sqlgroup::bench {
namespace {

// Starts `sqlgroup consume` as a child that dies with the harness.
pid_t Spawn(const RebalanceConfig& c, const std::string& group,
            const std::string& instance) {
  std::vector<std::string> argv = {
      c.cli,
      "consume",
      "--dsn=" + c.dsn,
      "--group=" + group,
      "--handler=noop",
      "--workers=2",
      "--instance=" + instance,
      "--metrics_addr=",
      "--log_level=info",
      c.notify ? "--notify=true" : "--notify=false"};
  if (c.static_timeout_s > 0) {
    argv.push_back(absl::StrCat("--static_timeout=", c.static_timeout_s, "s"));
  }
  const std::string log = absl::StrCat(c.log_dir, "/", instance, ".log");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  return pid;
}

// What the harness sees of the group in one statement.
struct Snapshot {
  // Live sessions (heartbeating, or static and away), lexical order.
  std::vector<std::string> live;
  std::vector<std::string> instances;  // same order
  std::vector<bool> is_static;         // same order
  std::vector<int64_t> created_us;     // same order, database clock
  std::vector<std::string> owners;     // per part; "" when free
  int64_t waiting = 0;                 // items not yet acknowledged
  int64_t now_us = 0;                  // database clock
};

class Watcher {
 public:
  Watcher(const std::string& dsn, const std::string& group, int parts,
          std::shared_ptr<const Assignor> assignor)
      : conn_(Connect(dsn, "bench-rebalance")),
        group_(group),
        parts_(parts),
        assignor_(std::move(assignor)) {
    conn_->prepare(
        "snap",
        "SELECT (SELECT string_agg(s.id::text || '/' || "
        "  coalesce(s.instance, '') || '/' || "
        "  (extract(epoch from s.created_at) * 1000000)::bigint || '/' || "
        "  (s.static_timeout IS NOT NULL)::int, ',' ORDER BY s.id) "
        "  FROM sqlgroup.sessions s JOIN sqlgroup.groups g "
        "  ON g.name = s.group_name WHERE s.group_name = $1 "
        "  AND (s.heartbeated_at > clock_timestamp() - g.session_ttl "
        "    OR coalesce(s.away_until, '-infinity') > clock_timestamp())), "
        "(SELECT string_agg(part || '/' || session_id, ',') "
        "  FROM sqlgroup.session_parts WHERE group_name = $1), "
        "(SELECT count(*) FROM sqlgroup.items WHERE group_name = $1), "
        "(extract(epoch from clock_timestamp()) * 1000000)::bigint");
  }

  Snapshot Take() {
    pqxx::nontransaction tx(*conn_);
    const pqxx::row row = tx.exec_prepared1("snap", group_);
    Snapshot s;
    s.owners.assign(parts_, "");
    if (!row[0].is_null()) {
      for (absl::string_view m : absl::StrSplit(row[0].c_str(), ',')) {
        std::vector<std::string> f = absl::StrSplit(m, '/');
        s.live.push_back(f[0]);
        s.instances.push_back(f[1]);
        s.created_us.push_back(std::stoll(f[2]));
        s.is_static.push_back(f[3] == "1");
      }
    }
    if (!row[1].is_null()) {
      for (absl::string_view o : absl::StrSplit(row[1].c_str(), ',')) {
        std::vector<std::string> f = absl::StrSplit(o, '/');
        s.owners[std::stoi(f[0])] = f[1];
      }
    }
    s.waiting = row[2].as<int64_t>();
    s.now_us = row[3].as<int64_t>();
    return s;
  }

  // Every part owned by its target among the live members, as the members
  // assign it (static members by instance name), and `instance` live
  // (present) or not; for a restart, under a session other than `old`,
  // which must be gone. The sticky target depends on the owners, but not on how
  // far the members got in moving to it, so it is the target when the owners
  // match it.
  bool Settled(const Snapshot& s, const std::string& instance, bool present,
               const std::string& old = "") const {
    bool found = false;
    for (size_t i = 0; i < s.live.size(); ++i) {
      found |= s.instances[i] == instance && s.live[i] != old;
    }
    if (found != present || s.live.empty()) return false;
    // A restart is over when the old session is gone with all its parts
    // (a killed one's, after its TTL unless a static member replaced it).
    if (!old.empty() &&
        (std::find(s.live.begin(), s.live.end(), old) != s.live.end() ||
         std::find(s.owners.begin(), s.owners.end(), old) != s.owners.end())) {
      return false;
    }
    store::GroupView view;
    view.live_sessions = s.live;
    for (size_t i = 0; i < s.live.size(); ++i) {
      if (s.is_static[i]) view.static_instances[s.live[i]] = s.instances[i];
    }
    for (int p = 0; p < parts_; ++p) {
      if (!s.owners[p].empty()) view.ownership.owner_of[p] = s.owners[p];
    }
    const Assignment a = AssignMembers(*assignor_, view, "", parts_);
    for (int p = 0; p < parts_; ++p) {
      if (a.owner[p] < 0 || s.owners[p] != a.sessions[a.owner[p]]) {
        return false;
      }
    }
    return true;
  }

  // One item in every part, announced like a producer's batch.
  void InsertMarkers(bool notify) {
    pqxx::work tx(*conn_);
    std::string values;
    for (int p = 0; p < parts_; ++p) {
      absl::StrAppend(&values, p ? "," : "", "(", tx.quote(group_), ",'",
                      FormatUuid(PartStart(p, parts_) + 1 + seq_), "')");
    }
    ++seq_;
    tx.exec(absl::StrCat("INSERT INTO sqlgroup.items (group_name, id) VALUES ",
                         values));
    if (notify) {
      tx.exec_params("SELECT pg_notify('sqlgroup', $1)",
                     absl::StrCat("items:", group_));
    }
    tx.commit();
  }

 private:
  std::unique_ptr<pqxx::connection> conn_;
  const std::string group_;
  const int parts_;
  const std::shared_ptr<const Assignor> assignor_;
  uint64_t seq_ = 0;
};

// What one change did to the parts, from the snapshots taken during it.
class ChangeTracker {
 public:
  // `gone`: the session of the member that stops (empty for a join): from
  // the change on, its parts wait.
  ChangeTracker(const Snapshot& before, std::string gone)
      : gone_(std::move(gone)),
        owner_before_(before.owners),
        paused_us_(before.owners.size(), 0),
        moved_(before.owners.size(), false),
        last_(before) {
    Learn(before);
  }

  void Observe(const Snapshot& s) {
    Learn(s);
    // Each interval between two snapshots counts for a part that had no
    // running owner at its start.
    const int64_t dt = s.now_us - last_.now_us;
    for (size_t p = 0; p < s.owners.size(); ++p) {
      if (Paused(last_, p)) paused_us_[p] += dt;
      const std::string& o = s.owners[p];
      if (!o.empty() && InstanceOf(o) != InstanceOf(owner_before_[p])) {
        moved_[p] = true;
      }
    }
    last_ = s;
  }

  // The longest time any part had no running owner (ms).
  double LongestPauseMs() const {
    int64_t longest = 0;
    for (int64_t us : paused_us_) longest = std::max(longest, us);
    return longest / 1000.0;
  }
  // Parts that were owned, at some point, by a member other than their
  // owner before the change (a restart's own return does not count).
  int Moved() const {
    return static_cast<int>(std::count(moved_.begin(), moved_.end(), true));
  }

 private:
  void Learn(const Snapshot& s) {
    for (size_t i = 0; i < s.live.size(); ++i) {
      instance_of_[s.live[i]] = s.instances[i];
    }
  }
  std::string InstanceOf(const std::string& session) const {
    auto it = instance_of_.find(session);
    return it == instance_of_.end() ? session : it->second;
  }
  bool Paused(const Snapshot& s, size_t p) const {
    const std::string& o = s.owners[p];
    return o.empty() || o == gone_ ||
           std::find(s.live.begin(), s.live.end(), o) == s.live.end();
  }

  const std::string gone_;
  const std::vector<std::string> owner_before_;
  std::vector<int64_t> paused_us_;
  std::vector<bool> moved_;
  std::map<std::string, std::string> instance_of_;
  Snapshot last_;
};

struct Member {
  std::string instance;
  pid_t pid;
};

}  // namespace

void RunRebalance(const RebalanceConfig& c) {
  const bool is_static = c.static_timeout_s > 0;
  const std::string group =
      absl::StrCat(c.notify ? "rebalance_notify_" : "rebalance_poll_",
                   c.assignor, is_static ? "_static" : "");
  std::shared_ptr<const Assignor> assignor = AssignorNamed(c.assignor);
  if (!assignor) {
    throw std::invalid_argument("--assignor must be lexical or sticky");
  }
  {
    auto admin = Admin::Connect({.dsn = c.dsn});
    if (!admin.ok()) throw std::runtime_error(admin.status().ToString());
    (*admin)->DeleteGroup(group).IgnoreError();
    const absl::Status s =
        (*admin)->CreateGroup({.name = group,
                               .parts = c.parts,
                               .session_ttl = absl::Seconds(c.ttl_s),
                               .heartbeat_interval = absl::Seconds(c.ttl_s / 3),
                               .assignor = c.assignor});
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  Watcher watcher(c.dsn, group, c.parts, assignor);
  std::vector<Member> members;
  int next_name = 0;
  std::mt19937 rng(42);
  // Snapshots until `pred` holds, each shown to `tracker` (if any).
  auto wait_until = [&](auto pred, absl::Duration timeout, Snapshot* out,
                        ChangeTracker* tracker) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      Snapshot s = watcher.Take();
      if (tracker) tracker->Observe(s);
      if (pred(s)) {
        if (out) *out = std::move(s);
        return absl::Now();
      }
      if (absl::Now() > deadline) {
        throw std::runtime_error("the group did not settle in time");
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
  };
  auto join = [&]() -> std::string {
    Member m{absl::StrCat("m", next_name++), 0};
    m.pid = Spawn(c, group, m.instance);
    members.push_back(m);
    return m.instance;
  };
  for (int i = 0; i < c.members; ++i) join();
  wait_until(
      [&](const Snapshot& s) {
        return static_cast<int>(s.live.size()) == c.members &&
               watcher.Settled(s, members.back().instance, true);
      },
      absl::Seconds(60), nullptr, nullptr);

  // A static member's SIGTERM keeps its place: it leaves only by `group
  // leave`, so static runs restart instead of leaving.
  const std::vector<std::string> kinds =
      is_static ? std::vector<std::string>{"join", "restart", "kill_restart"}
                : std::vector<std::string>{"join", "leave",   "join",
                                           "kill", "restart", "kill_restart"};
  for (int trial = 0; trial < c.trials; ++trial) {
    for (const std::string& kind : kinds) {
      absl::SleepFor(absl::Milliseconds(300));  // quiet between changes
      const Snapshot before = watcher.Take();
      std::string subject, gone;
      size_t victim = 0;
      const bool restart = kind == "restart" || kind == "kill_restart";
      const bool present = kind == "join" || restart;
      if (kind != "join") {
        std::uniform_int_distribution<size_t> pick(0, members.size() - 1);
        victim = pick(rng);
        subject = members[victim].instance;
        for (size_t i = 0; i < before.live.size(); ++i) {
          if (before.instances[i] == subject) gone = before.live[i];
        }
      }
      ChangeTracker tracker(before, gone);
      const absl::Time t0 = absl::Now();
      if (kind == "join") {
        subject = join();
      } else {
        const bool killed = kind == "kill" || kind == "kill_restart";
        kill(members[victim].pid, killed ? SIGKILL : SIGTERM);
        if (restart) {
          // Gone (a graceful stop drains and steps away or leaves first),
          // then the same name again at once.
          wait_until(
              [&](const Snapshot&) {
                return waitpid(members[victim].pid, nullptr, WNOHANG) ==
                       members[victim].pid;
              },
              absl::Seconds(60), nullptr, &tracker);
          members[victim].pid = Spawn(c, group, subject);
        }
        // A leaver is reaped below, after the group settled.
      }
      Snapshot after;
      const absl::Time owned = wait_until(
          [&](const Snapshot& s) {
            return watcher.Settled(s, subject, present, restart ? gone : "");
          },
          absl::Seconds(60), &after, &tracker);
      watcher.InsertMarkers(c.notify);
      const absl::Time processing =
          wait_until([&](const Snapshot& s) { return s.waiting == 0; },
                     absl::Seconds(60), nullptr, nullptr);
      if (!present) {
        waitpid(members[victim].pid, nullptr, 0);
        members.erase(members.begin() + victim);
      }
      // The fewest parts that had to move: the joiner's share, or what the
      // leaver owned; none for a restart.
      int minimum = 0;
      double from_register_ms = -1;  // joins: from the session's creation
      for (size_t i = 0; i < after.instances.size(); ++i) {
        if (kind != "join" || after.instances[i] != subject) continue;
        from_register_ms = (after.now_us - after.created_us[i]) / 1000.0;
        for (int p = 0; p < c.parts; ++p) {
          minimum += after.owners[p] == after.live[i];
        }
      }
      if (!present) {
        for (int p = 0; p < c.parts; ++p) minimum += before.owners[p] == gone;
      }
      JsonLine()
          .Add("bench", "rebalance")
          .Add("change", kind)
          .Add("notify", c.notify)
          .Add("assignor", c.assignor)
          .Add("static", is_static)
          .Add("trial", trial)
          .Add("members_before", static_cast<int>(before.live.size()))
          .Add("owned_ms", absl::ToDoubleMilliseconds(owned - t0))
          .Add("processing_ms", absl::ToDoubleMilliseconds(processing - t0))
          .Add("owned_from_register_ms", from_register_ms)
          .Add("moved", tracker.Moved())
          .Add("min_moved", minimum)
          .Add("max_pause_ms", tracker.LongestPauseMs())
          .Add("ttl_s", c.ttl_s)
          .Print();
    }
  }
  for (const Member& m : members) kill(m.pid, SIGTERM);
  for (const Member& m : members) waitpid(m.pid, nullptr, 0);
  if (is_static) {  // their places, held for the static timeout
    auto admin = Admin::Connect({.dsn = c.dsn});
    if (admin.ok()) (*admin)->DeleteGroup(group).IgnoreError();
  }
}

}  // namespace sqlgroup::bench
