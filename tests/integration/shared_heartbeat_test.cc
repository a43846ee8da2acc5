// Consumers of one process that share a heartbeat: one statement per
// interval for all their sessions, while each session still lives only as
// long as its own consumer asks for it.
#include "sqlgroup/shared_heartbeat.h"

#include <gtest/gtest.h>

#include <atomic>
#include <pqxx/pqxx>
#include <set>

#include "member/heartbeat_batcher.h"
#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"
#include "support/consumer_fixture.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using testing::WaitFor;

std::vector<Consumer*> Raw(const std::vector<std::unique_ptr<Consumer>>& cs) {
  std::vector<Consumer*> raw;
  for (const auto& c : cs) raw.push_back(c.get());
  return raw;
}

class SharedHeartbeatTest : public testing::ConsumerFixture {
 protected:
  void SetUp() override {
    ConsumerFixture::SetUp();
    auto shared = SharedHeartbeat::Create({member_dsn_});
    ASSERT_TRUE(shared.ok()) << shared.status();
    shared_ = *shared;
  }

  ConsumerOptions Sharing(const std::string& group) {
    ConsumerOptions o = Options(group, Recorder(group));
    o.shared_heartbeat = shared_;
    return o;
  }

  // n members sharing the heartbeat.
  std::vector<std::unique_ptr<Consumer>> StartSharing(const std::string& group,
                                                      int n) {
    std::vector<std::unique_ptr<Consumer>> members;
    for (int i = 0; i < n; ++i) members.push_back(Start(Sharing(group)));
    return members;
  }

  std::vector<std::string> Sessions(
      const std::vector<std::unique_ptr<Consumer>>& members) {
    std::vector<std::string> ids;
    for (const auto& c : members) ids.push_back(c->session_id());
    return ids;
  }

  std::string Text(const std::string& sql) {
    pqxx::nontransaction tx(*conn_);
    return tx.exec1(sql)[0].as<std::string>();
  }

  // Three members of group g (6 parts, TTL 2 s, heartbeat 400 ms), settled,
  // with the shared connection up (it connects for the first heartbeat).
  std::vector<std::unique_ptr<Consumer>> ThreeBeating() {
    CreateGroup("g", 6);
    std::vector<std::unique_ptr<Consumer>> members = StartSharing("g", 3);
    EXPECT_TRUE(Settles("g", 6, Raw(members)));
    EXPECT_TRUE(
        WaitFor([&] { return HeartbeatBackends() == 1; }, absl::Seconds(2)));
    return members;
  }

  int64_t KillHeartbeatBackend() {
    return Count(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = 'sqlgroup-heartbeat'");
  }

  // For roles other than superusers (the members'): -1 is none.
  void SetConnectionLimit(int limit) {
    const std::string database = Text("SELECT current_database()");
    pqxx::nontransaction tx(*conn_);
    tx.exec(absl::StrCat("ALTER DATABASE ", tx.quote_name(database),
                         " CONNECTION LIMIT ", limit));
  }

  int64_t HeartbeatBackends() {
    return Count(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = 'sqlgroup-heartbeat'");
  }

  static constexpr char kShared[] = "sqlgroup-heartbeat";
  static constexpr char kControl[] = "sqlgroup-control";

  // The backend of the (only) connection named `application` to the test
  // database, 0 while there is none.
  int64_t Pid(const std::string& application) {
    pqxx::nontransaction tx(*conn_);
    return tx
        .exec_params1(
            "SELECT coalesce(max(pid), 0) FROM pg_stat_activity "
            "WHERE application_name = $1 AND datname = current_database()",
            application)[0]
        .as<int64_t>();
  }

  // Holds `session`'s row locked for `hold` (so its heartbeats wait),
  // calling `sample` every 20 ms meanwhile.
  template <typename F>
  void WhileHeld(const std::string& session, absl::Duration hold, F sample) {
    pqxx::connection locker(db_.dsn());
    pqxx::work lock(locker);
    lock.exec_params(
        "SELECT 1 FROM sqlgroup.sessions WHERE id = $1::uuid FOR UPDATE",
        session);
    for (const absl::Time end = absl::Now() + hold; absl::Now() < end;) {
      sample();
      absl::SleepFor(absl::Milliseconds(20));
    }
    lock.abort();
  }

  // Shared heartbeat statements that failed while `session`'s heartbeats
  // were held up for `hold`: none while the bound is longer than the hold.
  int64_t FailuresWhileHeld(const std::string& session, absl::Duration hold) {
    const int64_t before = shared_->stats().failures;
    WhileHeld(session, hold, [] {});
    return shared_->stats().failures - before;
  }

  // The statements of `application`'s connection seen waiting while
  // `session`'s heartbeats were held up for `hold` (one per start time): 1
  // when the first waited the whole hold, 2 or more when a bound shorter
  // than the hold cancelled it and the next one waited in turn.
  int StatementsHeldUp(const std::string& application,
                       const std::string& session, absl::Duration hold) {
    std::set<std::string> started;
    WhileHeld(session, hold, [&] {
      pqxx::nontransaction tx(*conn_);
      for (const pqxx::row& row : tx.exec_params(
               "SELECT query_start::text FROM pg_stat_activity "
               "WHERE application_name = $1 AND wait_event_type = 'Lock'",
               application)) {
        started.insert(row[0].as<std::string>());
      }
    });
    return static_cast<int>(started.size());
  }

  std::shared_ptr<SharedHeartbeat> shared_;
};

TEST(NextSlot, IsTheNextPointOfTheShiftedGridStrictlyAfter) {
  const absl::Duration s = absl::Seconds(1);
  const absl::Duration none = absl::ZeroDuration();
  EXPECT_EQ(HeartbeatBatcher::NextSlot(absl::FromUnixMillis(10'250), s, none),
            absl::FromUnixSeconds(11));
  EXPECT_EQ(HeartbeatBatcher::NextSlot(absl::FromUnixSeconds(11), s, none),
            absl::FromUnixSeconds(12));
  EXPECT_EQ(HeartbeatBatcher::NextSlot(absl::FromUnixMillis(10'999),
                                       absl::Milliseconds(400), none),
            absl::FromUnixMillis(11'200));
  // A phase of 2.3 s on a 1 s grid shifts it by 300 ms.
  EXPECT_EQ(HeartbeatBatcher::NextSlot(absl::FromUnixMillis(10'250), s,
                                       absl::Milliseconds(2'300)),
            absl::FromUnixMillis(10'300));
  EXPECT_EQ(HeartbeatBatcher::NextSlot(absl::FromUnixMillis(10'300), s,
                                       absl::Milliseconds(2'300)),
            absl::FromUnixMillis(11'300));
}

TEST_F(SharedHeartbeatTest, MembersOfOneProcessHeartbeatInOneStatement) {
  CreateGroup("g", 12);  // TTL 2 s, heartbeat 400 ms
  std::vector<std::unique_ptr<Consumer>> members = StartSharing("g", 6);
  ASSERT_TRUE(Settles("g", 12, Raw(members)));
  const std::vector<std::string> sessions = Sessions(members);
  const SharedHeartbeatStats before = shared_->stats();
  absl::SleepFor(absl::Seconds(4));  // 10 intervals, two TTLs
  const SharedHeartbeatStats after = shared_->stats();
  const int64_t beats = after.beats - before.beats;
  const int64_t statements = after.statements - before.statements;
  // Every member kept its session by these heartbeats alone...
  EXPECT_EQ(Sessions(members), sessions);
  EXPECT_GE(beats, 6 * 10 * 8 / 10) << statements << " statements";
  // ...sent together: about one statement per interval, not one per member
  // (a member that wakes late on a loaded machine may miss its batch).
  EXPECT_LE(statements * 2, beats) << beats << " beats";
  EXPECT_EQ(HeartbeatBackends(), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.sessions WHERE heartbeated_at "
                  "> clock_timestamp() - interval '1.5 seconds'"),
            6);
  for (auto& c : members) EXPECT_TRUE(c->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.sessions"), 0);
}

// A listener that, once armed, hangs the control thread of its member at
// the next rebalance: the member's session must expire and be reaped, while
// the members it shares the heartbeat with keep theirs.
class Hang : public RebalanceListener {
 public:
  void OnPartsAssigned(const std::vector<int>&) override { Wait(); }
  void OnPartsRevoked(const std::vector<int>&) override { Wait(); }
  void Wait() {
    if (!armed) return;
    hung = true;
    while (armed) absl::SleepFor(absl::Milliseconds(5));
  }
  std::atomic<bool> armed{false};
  std::atomic<bool> hung{false};
};

TEST_F(SharedHeartbeatTest, AMemberThatHangsExpiresWhileTheOthersStay) {
  // TTL 2 s, heartbeat 400 ms. 42 parts: from 6 members to 7, every
  // member's range changes (no inner boundary of 6 blocks is one of 7).
  CreateGroup("g", 42);
  // The others log at debug level into one buffer, to count their reaps.
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100000);
  auto logger = std::make_shared<spdlog::logger>("others", sink);
  logger->set_level(spdlog::level::debug);
  auto logged = [&] {
    ConsumerOptions o = Sharing("g");
    o.logger = logger;
    return o;
  };
  std::vector<std::unique_ptr<Consumer>> others;
  for (int i = 0; i < 5; ++i) others.push_back(Start(logged()));
  Hang hang;
  ConsumerOptions o = Sharing("g");
  o.listener = &hang;
  auto hung = Start(std::move(o));
  // Declared after `hung`, so released before it is stopped, however the
  // test ends.
  struct Release {
    Hang& hang;
    ~Release() { hang.armed = false; }
  } release{hang};
  std::vector<Consumer*> six = Raw(others);
  six.push_back(hung.get());
  ASSERT_TRUE(Settles("g", 42, six));
  absl::SleepFor(absl::Seconds(1));  // it has heartbeated with the others
  const std::string hung_session = hung->session_id();
  // A seventh member joins: the next rebalance hangs the sixth.
  hang.armed = true;
  others.push_back(Start(logged()));
  ASSERT_TRUE(WaitFor([&] { return hang.hung.load(); }, absl::Seconds(5)));
  // The sixth may hang on a rebalance of its own before the seventh has
  // registered (a fresh-clone CI run caught it): wait for its session.
  ASSERT_TRUE(WaitFor([&] { return !others.back()->session_id().empty(); },
                      absl::Seconds(5)));
  const std::vector<std::string> sessions = Sessions(others);
  // Its session goes within the TTL and a heartbeat or two, and its parts
  // go to the others.
  EXPECT_TRUE(WaitFor(
      [&] {
        return Count(absl::StrCat("SELECT count(*) FROM sqlgroup.sessions "
                                  "WHERE id = '",
                                  hung_session, "'")) == 0;
      },
      absl::Seconds(4)));
  EXPECT_TRUE(Settles("g", 42, Raw(others), absl::Seconds(3)));
  EXPECT_EQ(Sessions(others), sessions);
  // One of the six reaped it. Few tried, not all six: they all saw the
  // expiry in the same replies, and only the member told of it reaps (a
  // late member that missed a batch, or one re-reading the group, may try
  // too and find nothing).
  int attempts = 0;
  int reaped = 0;
  for (const std::string& line : sink->last_formatted()) {
    attempts += line.find("reaping expired sessions") != std::string::npos;
    reaped += line.find("reaped expired session(s)") != std::string::npos &&
              line.find(hung_session) != std::string::npos;
  }
  EXPECT_EQ(reaped, 1);
  EXPECT_GE(attempts, 1);
  EXPECT_LE(attempts, 3);
  // Released, it finds its session gone and joins again as a new one.
  hang.armed = false;
  std::vector<Consumer*> all = Raw(others);
  all.push_back(hung.get());
  EXPECT_TRUE(Settles("g", 42, all));
  EXPECT_NE(hung->session_id(), hung_session);
  EXPECT_EQ(Sessions(others), sessions);
}

TEST_F(SharedHeartbeatTest, AKilledHeartbeatConnectionCostsNoSession) {
  std::vector<std::unique_ptr<Consumer>> members = ThreeBeating();
  const std::vector<std::string> sessions = Sessions(members);
  const std::string control_pids =
      "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity "
      "WHERE application_name = 'sqlgroup-control'";
  const std::string controls = Text(control_pids);
  ASSERT_EQ(KillHeartbeatBackend(), 1);
  const SharedHeartbeatStats killed = shared_->stats();
  absl::SleepFor(absl::Seconds(3));  // past the TTL
  const SharedHeartbeatStats after = shared_->stats();
  EXPECT_GE(after.failures, 1);  // the statement after the kill
  EXPECT_GE(after.statements - killed.statements, 4);  // and it goes on
  EXPECT_EQ(HeartbeatBackends(), 1);
  EXPECT_EQ(Sessions(members), sessions);
  EXPECT_EQ(Text(control_pids), controls);  // their own were never touched
  EXPECT_TRUE(OwnedAsTargeted("g", 6, Raw(members)));
}

// The shared connection gone for longer than the TTL, and no new one to be
// had: each member heartbeats over its own control connection instead.
TEST_F(SharedHeartbeatTest, MembersOutliveTheSharedConnectionOnTheirOwn) {
  std::vector<std::unique_ptr<Consumer>> members = ThreeBeating();
  const std::vector<std::string> sessions = Sessions(members);
  // The members' role may open no new connection to this database: the
  // connections they hold stay, the shared one cannot come back.
  SetConnectionLimit(0);
  ASSERT_EQ(KillHeartbeatBackend(), 1);
  absl::SleepFor(absl::Seconds(4));  // two TTLs
  const std::vector<std::string> after = Sessions(members);
  SetConnectionLimit(-1);
  EXPECT_EQ(HeartbeatBackends(), 0);
  EXPECT_GE(shared_->stats().failures, 1);
  EXPECT_EQ(after, sessions);
  EXPECT_TRUE(OwnedAsTargeted("g", 6, Raw(members)));
}

// The shared connection's statements are bounded by the shortest TTL of
// the members attached now (a quarter of it, at least 250 ms): a member
// with a shorter TTL joining, its leaving, and its group's TTL altered each
// set new bounds, on the same connection. Seen from outside: a heartbeat
// statement held up by a row lock fails when the bound is shorter than the
// hold, and waits it out when it is longer.
TEST_F(SharedHeartbeatTest, TheShortestAttachedTtlBoundsTheStatements) {
  CreateGroup("patient", 2, absl::Seconds(20));  // bound: 5 s
  CreateGroup("hasty", 2);                       // TTL 2 s, bound: 500 ms
  std::unique_ptr<Consumer> patient = Start(Sharing("patient"));
  ASSERT_TRUE(WaitFor([&] { return Pid(kShared) != 0; }, absl::Seconds(3)));
  const std::string session = patient->session_id();
  const int64_t pid = Pid(kShared);

  std::unique_ptr<Consumer> hasty = Start(Sharing("hasty"));
  absl::SleepFor(absl::Seconds(1));  // a batch or two under the new bound
  EXPECT_GE(FailuresWhileHeld(session, absl::Seconds(2)), 1)
      << "hasty's bound, 500 ms";
  ASSERT_TRUE(hasty->Stop().ok());
  hasty.reset();
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(FailuresWhileHeld(session, absl::Seconds(2)), 0)
      << "the patient's bound again, 5 s";

  ASSERT_TRUE(
      admin_->AlterGroup("patient", absl::Seconds(4), std::nullopt).ok());
  absl::SleepFor(absl::Milliseconds(1500));  // a heartbeat reads it
  EXPECT_GE(FailuresWhileHeld(session, absl::Milliseconds(2500)), 1)
      << "the altered TTL's bound, 1 s";
  EXPECT_EQ(Pid(kShared), pid) << "one connection throughout";
  EXPECT_EQ(patient->session_id(), session);
}

// A member's own control connection follows its group's altered TTL too.
TEST_F(SharedHeartbeatTest, AnAlteredTtlBoundsTheControlConnection) {
  CreateGroup("patient", 2, absl::Seconds(20));  // bound: 5 s
  std::unique_ptr<Consumer> patient =
      Start(Options("patient", Recorder("patient")));  // heartbeats alone
  ASSERT_TRUE(WaitFor([&] { return !patient->session_id().empty(); },
                      absl::Seconds(3)));
  const std::string session = patient->session_id();
  const int64_t pid = Pid(kControl);
  EXPECT_EQ(StatementsHeldUp(kControl, session, absl::Seconds(2)), 1)
      << "TTL 20 s, bound 5 s";

  ASSERT_TRUE(
      admin_->AlterGroup("patient", absl::Seconds(4), std::nullopt).ok());
  absl::SleepFor(absl::Milliseconds(1500));  // a heartbeat reads it
  EXPECT_GE(StatementsHeldUp(kControl, session, absl::Milliseconds(2500)), 2)
      << "TTL 4 s, bound 1 s";
  EXPECT_EQ(Pid(kControl), pid) << "one connection throughout";
  EXPECT_EQ(patient->session_id(), session);
}

TEST_F(SharedHeartbeatTest, WrongInputIsRefusedWithAReason) {
  CreateGroup("g", 2);
  // Shared over another connection string than the consumer's.
  auto other = SharedHeartbeat::Create({db_.dsn()});
  ASSERT_TRUE(other.ok()) << other.status();
  ConsumerOptions o = Options("g", Recorder("g"));
  o.shared_heartbeat = *other;
  auto c = Consumer::Create(std::move(o));
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_NE(c.status().message().find("another dsn"), std::string::npos);
  // Nothing listens there.
  auto unreachable = SharedHeartbeat::Create(
      {"host=127.0.0.1 port=1 dbname=x", absl::Seconds(1)});
  ASSERT_FALSE(unreachable.ok());
  EXPECT_TRUE(absl::IsUnavailable(unreachable.status()))
      << unreachable.status();
  EXPECT_NE(unreachable.status().message().find("127.0.0.1"),
            std::string::npos);
}

}  // namespace
}  // namespace sqlgroup
