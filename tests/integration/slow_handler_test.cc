// Handlers slower than a handover, through the CLI (`sqlgroup consume`
// with an exec handler that logs every start and end with its process id,
// tests/support/slow_handler.py): a part moves to a joining member only
// after the handler calls on it returned, a graceful stop acknowledges the
// item in flight, and a second signal or --drain_timeout cuts a call off
// with its attempt counted; a delivery cut short by the member's death
// counts an attempt too. Checked from the handlers' own log (invariant 10:
// no item ever runs on two live members at once).
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "support/consumer_fixture.h"
#include "support/subprocess.h"

namespace sqlgroup::testing {
namespace {

// One delivery of an item, as the handler logged it. A call cut off (its
// process killed) logged no end: it ended within 0.1 s of its last sign of
// life, which `end` is then.
struct Delivery {
  std::string pid;
  int attempt = 0;
  double start = 0;
  double end = 0;
  bool cut = true;  // until its end is logged
};

class SlowHandlerTest : public ConsumerFixture {
 protected:
  void SetUp() override {
    ConsumerFixture::SetUp();
    log_ = absl::StrCat(
        ::testing::TempDir(), "/slow-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    for (const char* suffix : {".log", ".a", ".b", ".c"}) {
      std::remove((log_ + suffix).c_str());
    }
  }

  // `sqlgroup consume` of group g with the slow handler, output to
  // log_ + suffix.
  std::unique_ptr<ChildProcess> Member(const std::string& suffix,
                                       std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {
        CliPath(),
        "consume",
        "--group",
        "g",
        "--handler",
        absl::StrCat("exec:python3 ", SourceDir(),
                     "/tests/support/slow_handler.py ", log_, ".log"),
        "--handler_timeout",
        "60s",
        "--workers",
        "4",
        "--max_connections",
        "6",
        "--dsn",
        member_dsn_,
        "--metrics_addr",
        "",
        "--log_level",
        "info"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(argv, log_ + suffix);
  }

  // Items of keys k0..k(n-1), one each, whose payload says how long each
  // attempt of the handler takes.
  void ProduceSlow(int keys, const std::string& seconds) {
    auto p = Producer::Create({.dsn = db_.dsn(), .group = "g"});
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<NewItem> items;
    for (int k = 0; k < keys; ++k) {
      items.push_back({.key = absl::StrCat("k", k), .payload = seconds});
    }
    ASSERT_TRUE((*p)->Enqueue(items).ok());
  }

  // item id -> its deliveries, in the order they started.
  std::map<std::string, std::vector<Delivery>> Runs() const {
    std::map<std::string, std::vector<Delivery>> runs;
    std::ifstream in(log_ + ".log");
    for (std::string line; std::getline(in, line);) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      if (f.size() != 5) continue;
      double t = 0;
      int attempt = 0;
      if (!absl::SimpleAtod(f[4], &t) || !absl::SimpleAtoi(f[3], &attempt)) {
        continue;
      }
      std::vector<Delivery>& of_item = runs[f[1]];
      if (f[0] == "start") {
        of_item.push_back(
            {.pid = f[2], .attempt = attempt, .start = t, .end = t + 0.1});
        continue;
      }
      for (Delivery& r : of_item) {
        if (r.pid != f[2] || r.attempt != attempt || !r.cut) continue;
        r.end = f[0] == "end" ? t : t + 0.1;
        r.cut = f[0] != "end";
      }
    }
    return runs;
  }

  int Starts() const {
    int n = 0;
    for (const auto& [id, runs] : Runs()) n += static_cast<int>(runs.size());
    return n;
  }

  // Deliveries of one item in two processes that overlapped in time.
  static int Overlaps(
      const std::map<std::string, std::vector<Delivery>>& runs) {
    int n = 0;
    for (const auto& [id, of_item] : runs) {
      for (size_t i = 0; i < of_item.size(); ++i) {
        for (size_t j = i + 1; j < of_item.size(); ++j) {
          const Delivery& a = of_item[i];
          const Delivery& b = of_item[j];
          if (a.pid != b.pid && a.start < b.end && b.start < a.end) ++n;
        }
      }
    }
    return n;
  }

  // SIGTERM, and once the member said it is stopping, SIGTERM again: its
  // calls in flight are cut off (one signal right after another could be
  // merged into one).
  static void StopNow(ChildProcess& member) {
    member.Signal(SIGTERM);
    WaitFor(
        [&] {
          return member.Log().find("stopping gracefully") != std::string::npos;
        },
        absl::Seconds(10));
    member.Signal(SIGTERM);
  }

  std::string log_;
};

// The case: handlers slower than the old fixed 5 s drain deadline,
// and a second member joining while the first runs them. The parts that
// move wait for their calls: each item runs once, on one member.
TEST_F(SlowHandlerTest, AJoinNeverRunsAnItemOnTwoMembers) {
  CreateGroup("g", 4, absl::Seconds(2));
  ProduceSlow(8, "7");
  auto a = Member(".a");
  ASSERT_TRUE(WaitFor([&] { return Starts() >= 3; }, absl::Seconds(30)))
      << a->Log();
  auto b = Member(".b");
  // While a's calls run, describe shows the parts it hands over.
  EXPECT_TRUE(WaitFor(
      [&] {
        auto d = admin_->DescribeGroup("g");
        if (!d.ok()) return false;
        for (const PartInfo& p : d->parts) {
          if (p.revoking_for) return true;
        }
        return false;
      },
      absl::Seconds(10)));
  ASSERT_TRUE(Drained(absl::Seconds(90))) << a->Log() << b->Log();
  // Both own parts in the end: the join went through.
  EXPECT_TRUE(WaitFor(
      [&] {
        return Count(
                   "SELECT count(DISTINCT session_id) FROM "
                   "sqlgroup.session_parts WHERE group_name = 'g'") == 2;
      },
      absl::Seconds(20)));
  a->Signal(SIGTERM);
  b->Signal(SIGTERM);
  EXPECT_EQ(a->Wait(absl::Seconds(30)), 0) << a->Log();
  EXPECT_EQ(b->Wait(absl::Seconds(30)), 0) << b->Log();
  const auto runs = Runs();
  EXPECT_EQ(runs.size(), 8u);
  EXPECT_EQ(Overlaps(runs), 0);
  for (const auto& [id, of_item] : runs) {
    // Acknowledged by the member that ran it: never repeated.
    EXPECT_EQ(of_item.size(), 1u) << id;
    for (const Delivery& r : of_item) {
      EXPECT_EQ(r.attempt, 1) << id;
      EXPECT_FALSE(r.cut) << id;
    }
  }
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 0);
}

// A deploy: SIGTERM while the handler runs. The member waits for the call
// and acknowledges its item before it leaves; nothing is repeated.
TEST_F(SlowHandlerTest, AGracefulStopAcknowledgesTheItemInFlight) {
  CreateGroup("g", 4, absl::Seconds(2));
  ProduceSlow(1, "8");  // longer than the old fixed 5 s drain deadline
  auto a = Member(".a");
  ASSERT_TRUE(WaitFor([&] { return Starts() == 1; }, absl::Seconds(30)))
      << a->Log();
  a->Signal(SIGTERM);
  EXPECT_EQ(a->Wait(absl::Seconds(30)), 0) << a->Log();
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 0) << a->Log();
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.sessions"), 0);
  const auto runs = Runs();
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_EQ(runs.begin()->second.size(), 1u);
  EXPECT_FALSE(runs.begin()->second.front().cut);
}

// A second signal does not wait: the call is cut off (the process
// killed), and the item comes back later with attempt 2.
TEST_F(SlowHandlerTest, ASecondSignalCutsOffTheCallAndItsAttemptCounts) {
  CreateGroup("g", 4, absl::Seconds(2));
  ProduceSlow(1, "60 0");
  auto a = Member(".a");
  ASSERT_TRUE(WaitFor([&] { return Starts() == 1; }, absl::Seconds(30)))
      << a->Log();
  StopNow(*a);
  EXPECT_EQ(a->Wait(absl::Seconds(15)), 0) << a->Log();
  // The cut-off call ended with its process, before a exited.
  const double a_gone = absl::ToUnixMicros(absl::Now()) / 1e6;
  EXPECT_EQ(Count("SELECT attempts FROM sqlgroup.items"), 1) << a->Log();
  auto b = Member(".b");
  ASSERT_TRUE(Drained(absl::Seconds(60))) << b->Log();
  b->Signal(SIGTERM);
  EXPECT_EQ(b->Wait(absl::Seconds(30)), 0) << b->Log();
  const auto runs = Runs();
  ASSERT_EQ(runs.size(), 1u);
  const std::vector<Delivery>& of_item = runs.begin()->second;
  ASSERT_EQ(of_item.size(), 2u);
  EXPECT_TRUE(of_item[0].cut);
  EXPECT_EQ(of_item[1].attempt, 2);
  EXPECT_GT(of_item[1].start, a_gone);
  EXPECT_FALSE(of_item[1].cut);
  EXPECT_EQ(Overlaps(runs), 0);
}

// --drain_timeout bounds how long a revoke waits: then the calls on the
// moving parts are cut off, and only once they ended does the part move.
// Their items run again at the new owner with attempt 2, never at once.
TEST_F(SlowHandlerTest, ARevokeCutsOffCallsPastTheDrainTimeout) {
  CreateGroup("g", 4, absl::Seconds(2));
  ProduceSlow(8, "60 0");
  auto a = Member(".a", {"--drain_timeout", "1s"});
  ASSERT_TRUE(WaitFor([&] { return Starts() >= 4; }, absl::Seconds(30)))
      << a->Log();
  // With a worker for every item, none of b's waits behind another's
  // 60 s call.
  auto b = Member(".b", {"--drain_timeout", "1s", "--workers", "8",
                         "--max_connections", "10"});
  // b runs again what a was cut off on.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& [id, of_item] : Runs()) {
          if (of_item.size() >= 2 && !of_item.back().cut) return true;
        }
        return false;
      },
      absl::Seconds(60)))
      << a->Log() << b->Log();
  EXPECT_NE(a->Log().find("cutting them off"), std::string::npos) << a->Log();
  const auto runs = Runs();
  EXPECT_EQ(Overlaps(runs), 0);
  for (const auto& [id, of_item] : runs) {
    for (size_t i = 1; i < of_item.size(); ++i) {
      EXPECT_EQ(of_item[i].attempt, of_item[i - 1].attempt + 1) << id;
    }
  }
  // The 60 s calls a keeps are cut off by the second signal.
  StopNow(*a);
  StopNow(*b);
  EXPECT_EQ(a->Wait(absl::Seconds(30)), 0) << a->Log();
  EXPECT_EQ(b->Wait(absl::Seconds(30)), 0) << b->Log();
}

// A poison item that kills its member (kill -9) on every delivery, members
// started again each time: each new owner counts the delivery its dead
// predecessor did not finish, and after max_attempts the item goes to the
// dead letters instead of being handed out for ever.
TEST_F(SlowHandlerTest, AnItemThatKillsItsMemberEveryTimeEndsInDeadLetters) {
  CreateGroup("g", 4, absl::Seconds(1));  // the dead are reaped within 1 s
  ProduceSlow(1, "kill");
  const auto dead_items = [&] {
    return Count("SELECT count(*) FROM sqlgroup.dead_items");
  };
  for (int run = 1; run <= 5; ++run) {
    const int before = Starts();
    auto m = Member(absl::StrCat(".", run), {"--max_attempts", "3"});
    ASSERT_TRUE(WaitFor([&] { return Starts() > before || dead_items() > 0; },
                        absl::Seconds(30)))
        << m->Log();
    if (dead_items() > 0) {
      m->Signal(SIGTERM);
      EXPECT_EQ(m->Wait(absl::Seconds(30)), 0) << m->Log();
      break;
    }
    EXPECT_EQ(m->Wait(absl::Seconds(10)), -1) << "not killed: " << m->Log();
  }
  pqxx::nontransaction tx(*conn_);
  const pqxx::result dead =
      tx.exec("SELECT attempts, last_error FROM sqlgroup.dead_items");
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0][0].as<int>(), 3);
  EXPECT_NE(dead[0][1].as<std::string>().find("without an outcome"),
            std::string::npos)
      << dead[0][1].as<std::string>();
  // Delivered with attempt 1, 2 and 3: each redelivery said so.
  const auto runs = Runs();
  ASSERT_EQ(runs.size(), 1u);
  std::vector<int> attempts;
  for (const Delivery& d : runs.begin()->second) attempts.push_back(d.attempt);
  EXPECT_EQ(attempts, (std::vector<int>{1, 2, 3}));
}

}  // namespace
}  // namespace sqlgroup::testing
