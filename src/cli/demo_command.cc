// `sqlgroup demo`: the whole story on a private PostgreSQL with no set-up.
// A group of 16 parts, a producer, and a fleet of `sqlgroup consume`
// processes that grows from 1 to 4, loses one to kill -9 and one to a
// graceful stop; a live view of ownership, lag and throughput; and a summary
// that proves the run from the database: produced, acknowledged,
// dead-lettered, duplicates, losses and per-key order violations (from the
// count handler's counters, which check each key's item numbers), and how
// long each rebalance took.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <pqxx/pqxx>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cli/flags.h"
#include "cli/fleet.h"
#include "cli/handlers/handler_spec.h"
#include "cli/numbered_items.h"
#include "cli/signals.h"
#include "cli/subcommands.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/assignor.h"
#include "sqlgroup/private_postgres.h"
#include "status_macros.h"

namespace sqlgroup::cli {
namespace {

constexpr char kGroup[] = "demo";
constexpr int kParts = 16;
constexpr int kKeys = 100;
constexpr double kRate = 2000;  // items per second

struct Event {
  absl::Duration at;  // since start
  std::string what;   // "join member-2"
  std::string member;
  bool joined = false;  // the member joined (else it left or died)
  std::optional<absl::Duration> settled;  // until owners matched the target
};

// The event's member is live (joined) or gone (left, died), and every part
// is owned by its lexical target among the live members. Later events may
// overlap; this holds whatever they did.
bool Settled(const GroupDescription& d, const Event& e) {
  std::vector<std::string> live_ids;
  bool present = false;
  for (const MemberInfo& m : d.members) {
    if (m.expired) continue;
    present |= m.instance == e.member;
    live_ids.push_back(m.session_id);
  }
  if (present != e.joined) return false;
  const Assignment a = LexicalRangeAssignor().Assign(live_ids, kParts);
  for (const PartInfo& p : d.parts) {
    if (a.owner[p.part] < 0 || p.owner_session != a.sessions[a.owner[p.part]]) {
      return false;
    }
  }
  return true;
}

// One line per part owner: "1111222233334444" style, '.' when unowned.
std::string OwnershipMap(const GroupDescription& d) {
  std::string map;
  for (const PartInfo& p : d.parts) {
    map += p.owner_instance.empty() ? '.' : p.owner_instance.back();
  }
  return map;
}

struct Totals {
  int64_t produced = 0;
  int64_t counted = 0;
  int64_t duplicates = 0;  // counted beyond produced, per key
  int64_t missing = 0;     // produced but neither counted nor dead
  // Items of a key counted out of their enqueue order (counters'
  // order_violations: a number that was not the key's last one + 1).
  int64_t order_violations = 0;
  int64_t dead = 0;
  int64_t waiting = 0;
};

Totals ReadTotals(pqxx::connection& conn) {
  pqxx::work tx(conn);
  Totals t;
  const auto row = tx.exec1(
      "WITH dead AS (SELECT coalesce(key, '') AS key, count(*) AS n FROM "
      "  sqlgroup.dead_items WHERE group_name = 'demo' GROUP BY 1) "
      "SELECT coalesce(sum(p.n), 0), coalesce(sum(c.n), 0), "
      "  coalesce(sum(greatest(coalesce(c.n, 0) - p.n, 0)), 0), "
      "  coalesce(sum(greatest(p.n - coalesce(c.n, 0) - coalesce(d.n, 0), "
      "    0)), 0), "
      "  (SELECT count(*) FROM sqlgroup.dead_items WHERE group_name = "
      "    'demo'), "
      "  (SELECT count(*) FROM sqlgroup.items WHERE group_name = 'demo'), "
      "  (SELECT coalesce(sum(order_violations), 0) "
      "   FROM sqlgroup_demo.counters) "
      "FROM sqlgroup_demo.produced p "
      "LEFT JOIN sqlgroup_demo.counters c USING (key) "
      "LEFT JOIN dead d USING (key)");
  t.produced = row[0].as<int64_t>();
  t.counted = row[1].as<int64_t>();
  t.duplicates = row[2].as<int64_t>();
  t.missing = row[3].as<int64_t>();
  t.dead = row[4].as<int64_t>();
  t.waiting = row[5].as<int64_t>();
  t.order_violations = row[6].as<int64_t>();
  tx.commit();
  return t;
}

// Keys k0..k99 at kRate items/s, numbered per key (the payload is the
// item's number within its key, for the count handler to check order), each
// batch and its tally in one transaction, until `stop`.
void ProduceUntil(const std::string& dsn, const std::atomic<bool>& stop) {
  pqxx::connection conn(dsn);
  const int batch = static_cast<int>(kRate / 20);
  const absl::Time start = absl::Now();
  int64_t sent = 0;
  while (!stop) {
    std::vector<std::string> keys(batch);
    for (int i = 0; i < batch; ++i) {
      keys[i] = absl::StrCat("k", (sent + i) % kKeys);
    }
    pqxx::work tx(conn);
    if (!EnqueueNumbered(tx, kGroup, keys, /*payload_bytes=*/0).ok()) return;
    tx.commit();
    sent += batch;
    absl::SleepFor(start + absl::Seconds(sent / kRate) - absl::Now());
  }
}

class Demo {
 public:
  Demo(absl::Duration duration, bool tty)
      : duration_(duration), tty_(tty), signals_(BlockStopSignals()) {}

  absl::Status Run() {
    Say("starting a private PostgreSQL 15...");
    ASSIGN_OR_RETURN(pg_, PrivatePostgres::Start({}));
    dsn_ = pg_->Dsn();
    Say(absl::StrCat("PostgreSQL up on 127.0.0.1:", pg_->port()));
    ASSIGN_OR_RETURN(admin_, Admin::Connect({.dsn = dsn_}));
    ASSIGN_OR_RETURN(MigrateResult m, admin_->Migrate());
    Say(absl::StrCat("schema version ", m.to_version));
    RETURN_IF_ERROR(
        admin_->CreateGroup({.name = kGroup,
                             .parts = kParts,
                             .session_ttl = absl::Seconds(3),
                             .heartbeat_interval = absl::Milliseconds(500)}));
    RETURN_IF_ERROR(EnsureDemoTables(dsn_));
    checker_ = std::make_unique<pqxx::connection>(dsn_);
    Say(absl::StrFormat(
        "group %s: %d parts, ttl 3s, heartbeat 500ms; producing %.0f items/s "
        "over %d keys; count handler",
        kGroup, kParts, kRate, kKeys));
    log_dir_ = absl::StrCat(pg_->data_dir(), "/../demo-logs");
    std::filesystem::create_directories(log_dir_);
    fleet_ = std::make_unique<Fleet>(
        std::vector<std::string>{
            "--dsn=" + dsn_, "--group=demo", "--handler=count", "--workers=2",
            "--metrics_addr=127.0.0.1:0", "--log_level=info"},
        log_dir_);
    start_ = absl::Now();
    std::thread producer(ProduceUntil, dsn_, std::cref(stop_producing_));
    absl::Status s = Script();
    stop_producing_ = true;
    producer.join();
    if (s.ok()) s = Drain();
    for (const std::string& name : fleet_->running()) {
      fleet_->Stop(name, absl::Seconds(10)).IgnoreError();
    }
    if (s.ok()) s = Summary();
    admin_.reset();
    checker_.reset();
    fleet_.reset();
    if (!s.ok()) {
      Say(absl::StrCat("member logs were in ", log_dir_,
                       " (removed with the cluster)"));
    }
    pg_->Stop().IgnoreError();
    Say("private PostgreSQL stopped");
    return s;
  }

 private:
  void Say(const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }

  absl::Duration Elapsed() const { return absl::Now() - start_; }

  // The membership story, stretched over the duration.
  absl::Status Script() {
    struct Step {
      double at;  // fraction of the duration
      std::string action, member;
    };
    const Step steps[] = {
        {0.00, "join", "member-1"},    {0.10, "join", "member-2"},
        {0.20, "join", "member-3"},    {0.30, "join", "member-4"},
        {0.45, "kill -9", "member-2"}, {0.65, "graceful stop", "member-3"},
    };
    for (const Step& step : steps) {
      RETURN_IF_ERROR(WatchUntil(start_ + duration_ * step.at));
      if (step.action == "join") {
        RETURN_IF_ERROR(fleet_->Start(step.member));
      } else if (step.action == "kill -9") {
        RETURN_IF_ERROR(fleet_->Kill(step.member));
      } else {
        ASSIGN_OR_RETURN(int code,
                         fleet_->Stop(step.member, absl::Seconds(10)));
        if (code != 0) {
          return absl::InternalError(
              absl::StrCat(step.member, " exited with ", code, " on SIGTERM"));
        }
      }
      events_.push_back({Elapsed(), step.action + " " + step.member,
                         step.member, step.action == "join"});
      Say(absl::StrFormat("[%5.1fs] %s %s", absl::ToDoubleSeconds(Elapsed()),
                          step.action, step.member));
    }
    return WatchUntil(start_ + duration_ * 0.85);
  }

  // Observes every 50 ms (settling of rebalances), draws every second.
  absl::Status WatchUntil(absl::Time until) {
    while (absl::Now() < until) {
      // Owners only (cheap) 20 times a second; lag once a second, to draw.
      ASSIGN_OR_RETURN(GroupDescription d,
                       admin_->DescribeGroup(kGroup, /*count_lag=*/false));
      for (Event& e : events_) {
        if (!e.settled && Settled(d, e)) {
          e.settled = Elapsed() - e.at;
        }
      }
      if (absl::Now() >= next_draw_) {
        ASSIGN_OR_RETURN(d, admin_->DescribeGroup(kGroup));
        Draw(d);
        next_draw_ = absl::Now() + absl::Seconds(1);
      }
      if (const int sig = TakeStopSignal(signals_, absl::Milliseconds(50))) {
        return absl::CancelledError(
            absl::StrCat("interrupted by signal ", sig,
                         "; the members were stopped and the cluster removed"));
      }
    }
    return absl::OkStatus();
  }

  void Draw(const GroupDescription& d) {
    const Totals t = ReadTotals(*checker_);
    const double secs = absl::ToDoubleSeconds(absl::Now() - last_draw_at_);
    const double rate = secs > 0 ? (t.counted - last_counted_) / secs : 0;
    last_counted_ = t.counted;
    last_draw_at_ = absl::Now();
    std::string members;
    for (const MemberInfo& m : d.members) {
      absl::StrAppend(&members, members.empty() ? "" : " ", m.instance,
                      m.expired ? "(expired)" : "");
    }
    if (!tty_) {
      Say(absl::StrFormat(
          "[%5.1fs] owners %s | lag %6d | acked %7d (%5.0f/s) | dead %d | %s",
          absl::ToDoubleSeconds(Elapsed()), OwnershipMap(d), t.waiting,
          t.counted, rate, t.dead, members));
      return;
    }
    std::string screen = "\033[H\033[J";
    absl::StrAppendFormat(&screen,
                          "sqlgroup demo  %5.1fs / %.0fs   group %s, %d "
                          "parts\n\nmembers: %s\n\n PART  OWNER      LAG\n",
                          absl::ToDoubleSeconds(Elapsed()),
                          absl::ToDoubleSeconds(duration_), kGroup, kParts,
                          members);
    for (const PartInfo& p : d.parts) {
      absl::StrAppendFormat(
          &screen, " %4d  %-9s %5d %s\n", p.part,
          p.owner_instance.empty() ? "-" : p.owner_instance, p.waiting_items,
          std::string(std::min<int64_t>(p.waiting_items / 50, 40), '#'));
    }
    absl::StrAppendFormat(&screen,
                          "\nproduced %d   acked %d (%.0f/s)   lag %d   dead "
                          "%d\n\n",
                          t.produced, t.counted, rate, t.waiting, t.dead);
    for (const Event& e : events_) {
      absl::StrAppendFormat(
          &screen, "[%5.1fs] %-22s %s\n", absl::ToDoubleSeconds(e.at), e.what,
          e.settled ? absl::StrFormat("settled in %.0f ms",
                                      absl::ToDoubleMilliseconds(*e.settled))
                    : std::string("rebalancing..."));
    }
    std::fputs(screen.c_str(), stdout);
    std::fflush(stdout);
  }

  // Producer stopped: wait until every item is acknowledged.
  absl::Status Drain() {
    Say(absl::StrFormat("[%5.1fs] producer stopped; draining",
                        absl::ToDoubleSeconds(Elapsed())));
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (ReadTotals(*checker_).waiting > 0) {
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            "items still waiting 60 s after the producer stopped");
      }
      RETURN_IF_ERROR(WatchUntil(absl::Now() + absl::Milliseconds(200)));
    }
    return absl::OkStatus();
  }

  absl::Status Summary() {
    const Totals t = ReadTotals(*checker_);
    std::string out = absl::StrFormat(
        "\n== sqlgroup demo summary (%.0f s, %d parts) ==\n"
        "produced          %d\n"
        "acknowledged      %d\n"
        "dead-lettered     %d\n"
        "still waiting     %d\n"
        "duplicates        %d\n"
        "lost              %d\n"
        "order violations  %d\n"
        "throughput        %.0f items/s acknowledged on average\n\n"
        "rebalances (until every part was owned by its lexical target):\n",
        absl::ToDoubleSeconds(Elapsed()), kParts, t.produced, t.counted, t.dead,
        t.waiting, t.duplicates, t.missing, t.order_violations,
        t.counted / absl::ToDoubleSeconds(Elapsed()));
    for (const Event& e : events_) {
      absl::StrAppendFormat(
          &out, "  [%5.1fs] %-24s %s\n", absl::ToDoubleSeconds(e.at), e.what,
          e.settled ? absl::StrFormat("%7.0f ms",
                                      absl::ToDoubleMilliseconds(*e.settled))
                    : std::string("did not settle"));
    }
    Say(out);
    if (t.duplicates != 0 || t.missing != 0 || t.waiting != 0 ||
        t.order_violations != 0) {
      return absl::InternalError(absl::StrFormat(
          "the run is not exact: %d duplicates, %d lost, %d waiting, %d "
          "order violations",
          t.duplicates, t.missing, t.waiting, t.order_violations));
    }
    Say("exactly once and in order: every produced item was acknowledged "
        "once, each key's items in their enqueue order (duplicates 0, lost "
        "0, order violations 0)");
    return absl::OkStatus();
  }

  const absl::Duration duration_;
  const bool tty_;
  // Ctrl-C ends the demo cleanly: members stopped, cluster removed.
  const sigset_t signals_;
  std::unique_ptr<PrivatePostgres> pg_;
  std::string dsn_;
  std::string log_dir_;
  std::unique_ptr<Admin> admin_;
  std::unique_ptr<pqxx::connection> checker_;
  std::unique_ptr<Fleet> fleet_;
  absl::Time start_;
  std::atomic<bool> stop_producing_{false};
  std::vector<Event> events_;
  absl::Time next_draw_;
  absl::Time last_draw_at_ = absl::Now();
  int64_t last_counted_ = 0;
};

}  // namespace

absl::Status RunDemo(const Args&) {
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  if (duration < absl::Seconds(10)) {
    return absl::InvalidArgumentError("--duration must be at least 10s");
  }
  try {
    return Demo(duration, isatty(STDOUT_FILENO)).Run();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("demo failed: ", e.what()));
  }
}

}  // namespace sqlgroup::cli
