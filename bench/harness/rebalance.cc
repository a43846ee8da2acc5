#include "rebalance.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "sqlgroup/admin.h"
#include "sqlgroup/assignor.h"

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
  std::vector<std::string> live;       // session ids, lexical order
  std::vector<std::string> instances;  // same order
  std::vector<std::string> owners;     // per part; "" when free
  std::vector<int64_t> created_us;     // same order, database clock
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
        "  (extract(epoch from s.created_at) * 1000000)::bigint, ',' "
        "  ORDER BY s.id) "
        "  FROM sqlgroup.sessions s JOIN sqlgroup.groups g "
        "  ON g.name = s.group_name WHERE s.group_name = $1 "
        "  AND s.heartbeated_at > clock_timestamp() - g.session_ttl), "
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

  // Every part owned by its target among the live members, and `instance`
  // live (present) or not. The sticky target depends on the owners, but
  // not on how far the members got in moving to it, so it is the target
  // when the owners match it.
  bool Settled(const Snapshot& s, const std::string& instance,
               bool present) const {
    bool found = false;
    for (const std::string& i : s.instances) found |= i == instance;
    if (found != present || s.live.empty()) return false;
    const Assignment a = assignor_->Assign(s.live, parts_, s.owners);
    for (int p = 0; p < parts_; ++p) {
      if (s.owners[p] != a.sessions[a.owner[p]]) return false;
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

struct Member {
  std::string instance;
  pid_t pid;
};

}  // namespace

void RunRebalance(const RebalanceConfig& c) {
  const std::string group = absl::StrCat(
      c.notify ? "rebalance_notify_" : "rebalance_poll_", c.assignor);
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
  auto wait_until = [&](auto pred, absl::Duration timeout, Snapshot* out) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      Snapshot s = watcher.Take();
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
      absl::Seconds(60), nullptr);

  const char* kinds[] = {"join", "leave", "join", "kill"};
  for (int trial = 0; trial < c.trials; ++trial) {
    for (const char* kind : kinds) {
      absl::SleepFor(absl::Milliseconds(300));  // quiet between changes
      const Snapshot before = watcher.Take();
      std::string subject;
      bool present = true;
      const absl::Time t0 = absl::Now();
      if (std::string(kind) == "join") {
        subject = join();
      } else {
        std::uniform_int_distribution<size_t> pick(0, members.size() - 1);
        const size_t victim = pick(rng);
        subject = members[victim].instance;
        present = false;
        kill(members[victim].pid,
             std::string(kind) == "kill" ? SIGKILL : SIGTERM);
        // Reaped below, after the group settled: a graceful member leaves
        // its session before it exits.
      }
      Snapshot after;
      const absl::Time owned = wait_until(
          [&](const Snapshot& s) {
            return watcher.Settled(s, subject, present);
          },
          absl::Seconds(60), &after);
      watcher.InsertMarkers(c.notify);
      const absl::Time processing =
          wait_until([&](const Snapshot& s) { return s.waiting == 0; },
                     absl::Seconds(60), nullptr);
      if (!present) {
        for (size_t i = 0; i < members.size(); ++i) {
          if (members[i].instance != subject) continue;
          waitpid(members[i].pid, nullptr, 0);
          members.erase(members.begin() + i);
          break;
        }
      }
      // Parts that changed owner, and the fewest that had to: the joiner's
      // share, or what the leaver owned.
      int moved = 0, minimum = 0;
      std::string subject_session;
      double from_register_ms = -1;  // joins: from the session's creation
      const Snapshot& with = present ? after : before;
      for (size_t i = 0; i < with.instances.size(); ++i) {
        if (with.instances[i] != subject) continue;
        subject_session = with.live[i];
        if (present) {
          from_register_ms = (after.now_us - after.created_us[i]) / 1000.0;
        }
      }
      for (int p = 0; p < c.parts; ++p) {
        moved += before.owners[p] != after.owners[p];
        minimum += (present ? after : before).owners[p] == subject_session;
      }
      JsonLine()
          .Add("bench", "rebalance")
          .Add("change", kind)
          .Add("notify", c.notify)
          .Add("assignor", c.assignor)
          .Add("trial", trial)
          .Add("members_before", static_cast<int>(before.live.size()))
          .Add("owned_ms", absl::ToDoubleMilliseconds(owned - t0))
          .Add("processing_ms", absl::ToDoubleMilliseconds(processing - t0))
          .Add("owned_from_register_ms", from_register_ms)
          .Add("moved", moved)
          .Add("min_moved", minimum)
          .Add("ttl_s", c.ttl_s)
          .Print();
    }
  }
  for (const Member& m : members) kill(m.pid, SIGTERM);
  for (const Member& m : members) waitpid(m.pid, nullptr, 0);
}

}  // namespace sqlgroup::bench
