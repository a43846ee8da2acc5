// consume's real handlers against a real PostgreSQL, built as the CLI
// builds them (ParseHandlerSpec + BuildHandlers): a SQL function inside the
// acknowledging transaction, a long-lived process speaking the line
// protocol, and an HTTP endpoint. Each: success, failure with retry, dead
// letter, a crash mid-item, per-key order; the SQL handler exactly once
// under kill -9 of the member.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cli/handlers/handler_spec.h"
#include "support/consumer_fixture.h"
#include "support/subprocess.h"

namespace sqlgroup::testing {
namespace {

using ::testing::HasSubstr;

// The payment example: app.pay pays an order once per item, in the
// acknowledging transaction. Payloads are "N WORD" (N: the item's number
// within its key); WORD fail raises (a retry), dead raises SGDLQ.
constexpr char kAppSql[] = R"sql(
CREATE SCHEMA app;
CREATE TABLE app.seen (id uuid, key text, attempt_seq int,
                       backend int DEFAULT pg_backend_pid(),
                       -- called by the ack's own statement (SqlFunction),
                       -- not by a statement of its own (alone, or grouped:
                       -- EXECUTE of it after a SAVEPOINT)
                       in_ack bool DEFAULT
                         (current_query() LIKE '%DELETE FROM sqlgroup.items%'
                          OR current_query() LIKE
                            '%SAVEPOINT sqlgroup_call; EXECUTE sqlgroup_ack_in_function(%'));
CREATE TABLE app.batches (size int);
CREATE TABLE app.log (id uuid, key text);
CREATE TABLE app.acked (key text, attempt int,
                        at timestamptz DEFAULT clock_timestamp());
CREATE TABLE app.paid (key text PRIMARY KEY, n int NOT NULL,
                       last_seq int NOT NULL, order_violations int NOT NULL);
CREATE FUNCTION app.pay(k text, p bytea, i uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  body text := convert_from(p, 'UTF8');
  seq int := split_part(body, ' ', 1)::int;
  word text := split_part(body, ' ', 2);
BEGIN
  INSERT INTO app.seen VALUES (i, k, seq);  -- rolled back on failure
  IF word = 'dead' THEN
    RAISE EXCEPTION 'order % cannot be paid', k USING ERRCODE = 'SGDLQ';
  ELSIF word = 'fail' THEN
    RAISE EXCEPTION 'payment provider down for %', k;
  END IF;
  INSERT INTO app.paid AS t VALUES (k, 1, seq, CASE WHEN seq = 1 THEN 0 ELSE 1 END)
  ON CONFLICT (key) DO UPDATE SET n = t.n + 1, last_seq = EXCLUDED.last_seq,
    order_violations = t.order_violations +
      CASE WHEN EXCLUDED.last_seq = t.last_seq + 1 THEN 0 ELSE 1 END;
END $$;
-- For items of no key: notes each in app.seen; WORD as for app.pay.
-- app.calls counts every call, those rolled back too.
CREATE SEQUENCE app.calls;
CREATE FUNCTION app.note(k text, p bytea, i uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  word text := split_part(convert_from(p, 'UTF8'), ' ', 2);
BEGIN
  PERFORM nextval('app.calls');
  INSERT INTO app.seen VALUES (i, k, 1);  -- rolled back on failure
  IF word = 'dead' THEN
    RAISE EXCEPTION 'item % cannot be handled', i USING ERRCODE = 'SGDLQ';
  ELSIF word = 'fail' THEN
    RAISE EXCEPTION 'item % failed', i;
  END IF;
END $$;
-- The same, but WORD twice breaks a deferred constraint: at COMMIT.
CREATE TABLE app.once (v int UNIQUE DEFERRABLE INITIALLY DEFERRED);
CREATE FUNCTION app.note_once(k text, p bytea, i uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO app.seen VALUES (i, k, 1);
  IF split_part(convert_from(p, 'UTF8'), ' ', 2) = 'twice' THEN
    INSERT INTO app.once VALUES (0), (0);
  END IF;
END $$;
CREATE FUNCTION app.pay_slowly(k text, p bytea, i uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF convert_from(p, 'UTF8') LIKE '% slow' THEN PERFORM pg_sleep(5); END IF;
  PERFORM app.pay(k, p, i);
END $$;
CREATE FUNCTION app.pay_strictly(k text, p bytea, i uuid) RETURNS void
LANGUAGE sql STRICT AS $$ SELECT app.pay(k, p, i) $$;
CREATE FUNCTION app.paid_rows(k text, p bytea, i uuid)
RETURNS SETOF app.paid LANGUAGE plpgsql AS $$
BEGIN
  PERFORM app.pay(k, p, i);
  RETURN QUERY SELECT * FROM app.paid WHERE key = k;
END $$;
CREATE FUNCTION app.pay_batch(k text[], p bytea[], i uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO app.batches VALUES (cardinality(i));
  FOR j IN 1 .. cardinality(i) LOOP PERFORM app.pay(k[j], p[j], i[j]); END LOOP;
END $$;
)sql";

// The lines of a handler's log, split on spaces.
std::vector<std::vector<std::string>> LogLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(absl::StrSplit(line, ' '));
  }
  return lines;
}

class HandlersTest : public ConsumerFixture {
 protected:
  void SetUp() override {
    ConsumerFixture::SetUp();
    ExecSql(db_.dsn(), kAppSql);
    ExecSql(db_.dsn(),
            absl::StrCat("GRANT USAGE ON SCHEMA app TO ", kMemberRole,
                         "; GRANT SELECT, INSERT, UPDATE ON ALL "
                         "TABLES IN SCHEMA app TO ",
                         kMemberRole,
                         "; GRANT USAGE ON ALL SEQUENCES IN SCHEMA app TO ",
                         kMemberRole));
    log_ = absl::StrCat(
        ::testing::TempDir(), "/handler-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name(),
        ".log");
    for (const char* suffix : {"", ".out", ".member"}) {
      std::remove((log_ + suffix).c_str());
    }
  }

  absl::StatusOr<cli::Handlers> Build(const std::string& text,
                                      bool batch = false,
                                      double fail_rate = 0) {
    auto spec = cli::ParseHandlerSpec(text);
    if (!spec.ok()) return spec.status();
    return cli::BuildHandlers(*spec, {.dsn = member_dsn_,
                                      .batch = batch,
                                      .timeout = absl::Seconds(1),
                                      .fail_rate = fail_rate});
  }

  ConsumerOptions OptionsFor(const std::string& group, const cli::Handlers& h) {
    ConsumerOptions o = Options(group, h.handler);
    o.batch_handler = h.batch_handler;
    o.sql_function = h.sql_function;
    return o;
  }

  std::unique_ptr<Consumer> StartWith(const std::string& group,
                                      const cli::Handlers& h,
                                      int sql_calls_per_commit = 1) {
    ConsumerOptions o = OptionsFor(group, h);
    o.sql_calls_per_commit = sql_calls_per_commit;
    o.max_attempts = 4;
    o.backoff_initial = absl::Milliseconds(50);
    o.backoff_max = absl::Milliseconds(200);
    return Start(std::move(o));
  }

  // `keys` keys with `per_key` items each, numbered "1 WORD".. per key;
  // `words` gives the word of chosen (key, number) pairs, "ok" otherwise.
  void ProduceKeyed(
      const std::string& group, int keys, int per_key,
      const std::map<std::pair<int, int>, std::string>& words = {}) {
    auto p = Producer::Create({.dsn = db_.dsn(), .group = group});
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<NewItem> items;
    for (int n = 1; n <= per_key; ++n) {
      for (int k = 0; k < keys; ++k) {
        auto it = words.find({k, n});
        items.push_back({.key = absl::StrCat("k", k),
                         .payload = absl::StrCat(
                             n, " ", it == words.end() ? "ok" : it->second)});
      }
    }
    ASSERT_TRUE((*p)->Enqueue(items).ok());
  }

  // `n` items of no key, "1 ok" but for `words` by index.
  void ProduceUnkeyed(const std::string& group, int n,
                      const std::map<int, std::string>& words = {}) {
    auto p = Producer::Create({.dsn = db_.dsn(), .group = group});
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<NewItem> items;
    for (int i = 0; i < n; ++i) {
      auto it = words.find(i);
      items.push_back({.payload = absl::StrCat(
                           "1 ", it == words.end() ? "ok" : it->second)});
    }
    ASSERT_TRUE((*p)->Enqueue(items).ok());
  }

  int64_t Commits() {
    pqxx::nontransaction(*conn_).exec("SELECT pg_stat_clear_snapshot()");
    return Count(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = "
        "current_database()");
  }

  // From a handler's log: each key's numbers in the order handled.
  std::map<std::string, std::vector<int>> NumbersByKey(int number_field) {
    std::map<std::string, std::vector<int>> by_key;
    for (const auto& f : LogLines(log_)) {
      by_key[f.at(1)].push_back(std::stoi(f.at(number_field)));
    }
    return by_key;
  }

  std::string DeadError(const std::string& key) {
    pqxx::nontransaction tx(*conn_);
    auto r = tx.exec_params(
        "SELECT attempts || ' ' || last_error FROM sqlgroup.dead_items "
        "WHERE key = $1",
        key);
    return r.empty() ? "" : r[0][0].as<std::string>();
  }

  // Starts tests/support/http_receiver.py logging to log_, on `port` (empty:
  // one the OS picks); returns the port it listens on.
  // `down_seconds` (non-empty): it answers 503 to everything for that long
  // after it starts, logging each such call to log_ + ".down".
  std::string StartReceiver(std::unique_ptr<ChildProcess>& receiver,
                            const std::string& port = "",
                            const std::string& down_seconds = "") {
    std::vector<std::string> argv = {
        "/usr/bin/env", "python3",
        SourceDir() + "/tests/support/http_receiver.py", log_};
    if (!port.empty() || !down_seconds.empty()) argv.push_back(port);
    if (!down_seconds.empty()) argv.push_back(down_seconds);
    std::remove((log_ + ".out").c_str());
    receiver = std::make_unique<ChildProcess>(argv, log_ + ".out");
    std::string listening;
    EXPECT_TRUE(WaitFor(
        [&] {
          const std::string out = receiver->Log();
          const size_t at = out.find("port: ");
          const size_t end = out.find('\n', at);
          if (at == std::string::npos || end == std::string::npos) {
            return false;
          }
          listening = out.substr(at + 6, end - at - 6);
          return true;
        },
        absl::Seconds(20)));
    return listening;
  }

  // `spec` calls app.pay: its errors are retried, then dead-letter the
  // item with `failed` as its attempts and last error; SGDLQ dead-letters
  // at once; nothing of a failed attempt stays, and each key's items are
  // paid in order.
  void ExpectErrorsRetryThenDeadLetter(const std::string& spec,
                                       const std::string& failed) {
    CreateGroup("g", 4);
    // k0's second item always fails; k1's first is dead at once; the items
    // behind them wait, in order, and then go on.
    ProduceKeyed("g", 3, 3, {{{0, 2}, "fail"}, {{1, 1}, "dead"}});
    auto h = Build(spec);
    ASSERT_TRUE(h.ok()) << h.status();
    auto c = StartWith("g", *h);
    ASSERT_TRUE(Drained(absl::Seconds(60)));
    ASSERT_TRUE(c->Stop().ok());
    EXPECT_EQ(DeadError("k0"), failed);
    EXPECT_EQ(DeadError("k1"), "1 order k1 cannot be paid");
    // The failed attempts' inserts rolled back with them.
    EXPECT_EQ(Count("SELECT count(*) FROM app.seen"), 7);
    EXPECT_EQ(Count("SELECT count(*) FROM app.seen WHERE key = 'k0' AND "
                    "attempt_seq = 2"),
              0);
    // Each key's survivors in order (a dead letter shows as a gap).
    EXPECT_EQ(Count("SELECT n FROM app.paid WHERE key = 'k2'"), 3);
    EXPECT_EQ(Count("SELECT order_violations FROM app.paid WHERE key = 'k2'"),
              0);
  }

  // `spec` with --batch pays 5 keys' 40 orders each through
  // app.pay_batch: every item once, each key in order, in batches of
  // several items; called by the ack's statement or (!in_ack) in the
  // batch's transaction.
  void ExpectBatchesOfArrays(const std::string& spec, bool in_ack) {
    CreateGroup("g", 4);
    ProduceKeyed("g", 5, 40);
    auto h = Build(spec, /*batch=*/true);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->sql_function.arrays, in_ack);
    EXPECT_EQ(h->batch_handler != nullptr, !in_ack);
    auto c = StartWith("g", *h);
    ASSERT_TRUE(Drained(absl::Seconds(60)));
    ASSERT_TRUE(c->Stop().ok());
    EXPECT_EQ(Count("SELECT count(*) FROM app.seen"), 200);
    EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM app.seen"), 200);
    EXPECT_EQ(Count("SELECT count(*) FROM app.seen WHERE in_ack"),
              in_ack ? 200 : 0);
    EXPECT_EQ(Count("SELECT count(*) FROM app.paid WHERE n = 40 AND "
                    "order_violations = 0"),
              5);
    // Batches, not items one by one: some carried several items.
    EXPECT_EQ(Count("SELECT sum(size) FROM app.batches"), 200);
    EXPECT_GT(Count("SELECT max(size) FROM app.batches"), 1);
  }

  std::string log_;
  // Each exec or http attempt; a hang costs this much.
  absl::Duration timeout_ = absl::Seconds(2);
};

TEST_F(HandlersTest, SqlFunctionPaysEachOrderOnceInKeyOrder) {
  CreateGroup("g", 8);
  ProduceKeyed("g", 10, 30);
  auto h = Build("sql:app.pay");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->sql_function.name, "app.pay");
  auto c = StartWith("g", *h);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM app.seen"), 300);
  // Each call was the ack's statement, a transaction of its own.
  EXPECT_EQ(Count("SELECT count(*) FROM app.seen WHERE in_ack"), 300);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM app.seen"), 300);
  EXPECT_EQ(Count("SELECT count(*) FROM app.paid WHERE n = 30 AND "
                  "last_seq = 30 AND order_violations = 0"),
            10);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 0);
}

// Workers that share the member's control connection (a budget of one)
// each prepare the statement there, under names of their own.
TEST_F(HandlersTest, SqlFunctionOnAConnectionItsWorkersShare) {
  CreateGroup("g", 8);
  ProduceKeyed("g", 10, 20);
  auto h = Build("sql:app.pay");
  ASSERT_TRUE(h.ok()) << h.status();
  ConsumerOptions o = OptionsFor("g", *h);
  o.workers = 3;
  o.max_connections = 1;
  auto c = Start(std::move(o));
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  const ConsumerStats stats = c->stats();
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_EQ(stats.failed, 0);
  EXPECT_GE(stats.borrowed_tasks, 10);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM app.seen"), 200);
  EXPECT_EQ(Count("SELECT count(*) FROM app.paid WHERE n = 20 AND "
                  "last_seq = 20 AND order_violations = 0"),
            10);
}

// A worker moves between connections: the first claim after a quiet
// spell on the member's control connection, then its own, which closes
// after a while without work; then the control connection again, where
// the statement is prepared already.
TEST_F(HandlersTest, SqlFunctionFollowsAWorkerFromConnectionToConnection) {
  CreateGroup("g", 2);
  auto h = Build("sql:app.pay");
  ASSERT_TRUE(h.ok()) << h.status();
  ConsumerOptions o = OptionsFor("g", *h);
  o.workers = 1;
  o.idle_connection_timeout = absl::Milliseconds(200);
  auto c = Start(std::move(o));
  ASSERT_NE(c, nullptr);
  for (int round = 1; round <= 3; ++round) {
    ProduceKeyed("g", 3, 4);
    ASSERT_TRUE(Drained(absl::Seconds(30)));
    // Quiet: the worker's own connection closes.
    ASSERT_TRUE(
        WaitFor([&] { return c->stats().connections == 1; }, absl::Seconds(10)))
        << "round " << round;
  }
  const ConsumerStats stats = c->stats();
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_EQ(stats.failed, 0);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM app.seen"), 36);
  // It did move: the statement ran on the control connection and on at
  // least one of the worker's own (which closes after each round).
  EXPECT_GE(stats.borrowed_tasks, 1);
  EXPECT_GE(Count("SELECT count(DISTINCT backend) FROM app.seen"), 2);
}

// A function on arrays, called by the ack's statement once per batch.
TEST_F(HandlersTest, SqlBatchHandlerGetsArrays) {
  ExpectBatchesOfArrays("sql:app.pay_batch", /*in_ack=*/true);
}

TEST_F(HandlersTest, SqlErrorsRetryThenDeadLetterAndRollBack) {
  // In the acknowledging transaction, a statement of its own.
  ExpectErrorsRetryThenDeadLetter(
      "sql:SELECT app.pay($1, $2, $3)",
      "4 the handler's statement failed (SQLSTATE P0001): payment provider "
      "down for k0");
  EXPECT_EQ(Count("SELECT count(*) FROM app.seen WHERE in_ack"), 0);
}

TEST_F(HandlersTest, SqlFunctionErrorsRetryThenDeadLetterAndRollBack) {
  // Called by the ack's statement.
  ExpectErrorsRetryThenDeadLetter(
      "sql:app.pay",
      "4 sql_function app.pay failed (SQLSTATE P0001): payment provider "
      "down for k0");
  EXPECT_EQ(Count("SELECT count(*) FROM app.seen WHERE NOT in_ack"), 0);
}

// The statement form with --batch: arrays in the batch's transaction.
TEST_F(HandlersTest, SqlBatchStatementGetsArraysInTheTransaction) {
  ExpectBatchesOfArrays("sql:SELECT app.pay_batch($1, $2, $3)",
                        /*in_ack=*/false);
}

// A function the ack's statement cannot call, one that returns a set, and
// one under injected failures (which come before the handler) run as a
// statement in the acknowledging transaction.
TEST_F(HandlersTest, SomeFunctionsRunAsAStatementOfTheirOwn) {
  CreateGroup("g", 4);
  ProduceKeyed("g", 3, 5);
  auto h = Build("sql:app.paid_rows");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->sql_function.name.empty());
  auto c = StartWith("g", *h);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM app.seen WHERE NOT in_ack"), 15);
  EXPECT_EQ(Count("SELECT count(*) FROM app.paid WHERE n = 5 AND "
                  "order_violations = 0"),
            3);
  auto injected = Build("sql:app.pay", /*batch=*/false, /*fail_rate=*/0.5);
  ASSERT_TRUE(injected.ok()) << injected.status();
  EXPECT_TRUE(injected->sql_function.name.empty());
  EXPECT_TRUE(injected->handler != nullptr);
  // A STRICT function of single items is refused on either path: the
  // statement would skip its call for a NULL key just the same.
  for (const double rate : {0.0, 0.5}) {
    const auto strict = Build("sql:app.pay_strictly", /*batch=*/false, rate);
    EXPECT_EQ(strict.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(strict.status().message(),
                HasSubstr("--handler=sql:app.pay_strictly: app.pay_strictly "
                          "is STRICT"));
  }
}

// The function runs while the fence holds the part's take: past half the
// group's TTL it is canceled, and the attempt fails, saying why.
TEST_F(HandlersTest, AFunctionSlowerThanHalfTheTtlIsCanceled) {
  CreateGroup("g", 2, absl::Seconds(2));
  ProduceKeyed("g", 2, 2, {{{0, 1}, "slow"}});
  auto h = Build("sql:app.pay_slowly");
  ASSERT_TRUE(h.ok()) << h.status();
  ConsumerOptions o = OptionsFor("g", *h);
  o.max_attempts = 2;
  o.backoff_initial = absl::Milliseconds(50);
  auto c = Start(std::move(o));
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_THAT(DeadError("k0"),
              HasSubstr("sql_function app.pay_slowly was canceled "
                        "(SQLSTATE 57014): it ran past the statement timeout, "
                        "half the group's TTL (1s)"));
  // The key went on after its dead letter; the other key was never held.
  EXPECT_EQ(Count("SELECT n FROM app.paid WHERE key = 'k0'"), 1);
  EXPECT_EQ(Count("SELECT n FROM app.paid WHERE key = 'k1'"), 2);
}

TEST_F(HandlersTest, BadSqlStatementsAreRefusedWithTheReason) {
  CreateGroup("g", 4);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"sql:SELEC 1", "syntax error at or near \"SELEC\""},
      {"sql:SELECT 1 + $4", "uses $4, but the handler passes only"},
      {"sql:app.nope", "function app.nope(text, bytea, uuid) does not exist"},
      {"sql:SELECT app.pay($2, $1, $3)", "does not exist"},
      {"sql:SELECT 1; SELECT 2", "cannot insert multiple commands"},
  };
  for (const auto& [spec, why] : cases) {
    const auto h = Build(spec);
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << spec;
    EXPECT_THAT(h.status().message(), HasSubstr(why)) << spec;
    EXPECT_THAT(h.status().message(), HasSubstr("--handler=" + spec)) << spec;
  }
  EXPECT_TRUE(Build("sql:SELECT length($2)").ok());
  EXPECT_TRUE(Build("sql:SELECT 1").ok());
  EXPECT_TRUE(Build("sql:app.pay_batch", /*batch=*/true).ok());
  EXPECT_FALSE(Build("sql:app.pay", /*batch=*/true).ok());
}

TEST_F(HandlersTest, ExecProcessRetriesDeadLettersAndSurvivesCrashes) {
  CreateGroup("g", 4);
  ProduceKeyed("g", 6, 10,
               {{{0, 2}, "retry"},
                {{1, 3}, "dead"},
                {{2, 4}, "crash"},
                {{3, 5}, "hang"},
                {{4, 6}, "garbage"}});
  auto h = Build(absl::StrCat("exec:python3 ", SourceDir(),
                              "/tests/support/exec_handler.py ", log_));
  ASSERT_TRUE(h.ok()) << h.status();
  auto c = StartWith("g", *h);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_EQ(DeadError("k1"), "1 this item can never succeed");
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 1);
  std::map<std::string, int> attempts;  // "key number" -> attempt acked
  for (const auto& f : LogLines(log_))
    attempts[f[1] + " " + f[4]] = std::stoi(f[2]);
  EXPECT_EQ(attempts.size(), 59u);  // every item but the dead one, once
  EXPECT_EQ(LogLines(log_).size(), 59u);
  EXPECT_EQ(attempts["k0 2"], 3);  // retry, retry, ok
  EXPECT_EQ(attempts["k2 4"], 2);  // the process died mid-item
  EXPECT_EQ(attempts["k3 5"], 2);  // killed at the timeout
  EXPECT_EQ(attempts["k4 6"], 2);  // out of protocol
  for (const auto& [key, numbers] : NumbersByKey(4)) {
    std::vector<int> want;
    for (int n = 1; n <= 10; ++n) {
      if (!(key == "k1" && n == 3)) want.push_back(n);
    }
    EXPECT_EQ(numbers, want) << key;
  }
}

TEST_F(HandlersTest, HttpEndpointRetriesDeadLettersAndSurvivesDrops) {
  CreateGroup("g", 4);
  std::unique_ptr<ChildProcess> receiver;
  const std::string port = StartReceiver(receiver);
  ASSERT_FALSE(port.empty());
  ProduceKeyed("g", 5, 10,
               {{{0, 2}, "retry"},
                {{1, 3}, "dead"},
                {{2, 4}, "drop"},
                {{3, 5}, "hang"}});
  auto h = Build(absl::StrCat("http://127.0.0.1:", port, "/items"));
  ASSERT_TRUE(h.ok()) << h.status();
  auto c = StartWith("g", *h);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_THAT(DeadError("k1"),
              HasSubstr("1 POST http://127.0.0.1:" + port +
                        "/items: the endpoint answered 422: cannot process"));
  std::map<std::string, int> attempts;
  for (const auto& f : LogLines(log_)) {
    attempts[f[1] + " " + f[4]] = std::stoi(f[2]);
    EXPECT_EQ(f[3], f[0]) << "Idempotency-Key is the item's id";
  }
  EXPECT_EQ(attempts.size(), 49u);
  EXPECT_EQ(LogLines(log_).size(), 49u);
  EXPECT_EQ(attempts["k0 2"], 3);  // 503, 503, 200
  EXPECT_EQ(attempts["k2 4"], 2);  // the connection dropped mid-item
  EXPECT_EQ(attempts["k3 5"], 2);  // no answer within the timeout
  for (const auto& [key, numbers] : NumbersByKey(4)) {
    for (size_t i = 1; i < numbers.size(); ++i) {
      EXPECT_LT(numbers[i - 1], numbers[i]) << key;
    }
  }
}

// An endpoint that answers 503 with Retry-After (2 s, or an HTTP-date 2..3
// s ahead) before it takes an item: the item's next try waits that long,
// far past its backoff (50 ms here), and the item is acknowledged on its
// second attempt. The wait is read from the database's clock at the ack
// against the moment the first attempt failed (the same host's clock).
TEST_F(HandlersTest, HttpRetryAfterPutsOffTheNextTry) {
  CreateGroup("g", 4);
  std::unique_ptr<ChildProcess> receiver;
  const std::string port = StartReceiver(receiver);
  ASSERT_FALSE(port.empty());
  ProduceKeyed("g", 3, 1, {{{0, 1}, "later"}, {{1, 1}, "laterdate"}});
  auto h = Build(absl::StrCat("http://127.0.0.1:", port, "/items"));
  ASSERT_TRUE(h.ok()) << h.status();
  absl::Mutex mu;
  std::map<std::string, absl::Time> failed_at;  // key -> first failure
  cli::Handlers wrapped = *h;
  wrapped.handler = [&, http = h->handler](const Item& item,
                                           AckTransaction& ack) {
    const absl::Status s = http(item, ack);
    if (!s.ok()) {
      absl::MutexLock lock(&mu);
      failed_at.emplace(*item.key, absl::Now());
      return s;
    }
    ack.work().exec_params(
        "INSERT INTO app.acked (key, attempt) VALUES ($1, "
        "$2)",
        *item.key, item.attempt);
    return s;
  };
  ConsumerOptions o = OptionsFor("g", wrapped);
  o.max_attempts = 4;
  o.backoff_initial = absl::Milliseconds(50);
  o.backoff_max = absl::Seconds(10);  // the cap is above what is asked
  auto c = Start(std::move(o));
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 0);
  std::map<std::string, std::pair<int, absl::Time>> acked;
  {
    pqxx::nontransaction tx(*conn_);
    for (const auto& row :
         tx.exec("SELECT key, attempt, (extract(epoch FROM at) * 1e6)::bigint "
                 "FROM app.acked")) {
      acked[row[0].as<std::string>()] = {
          row[1].as<int>(), absl::FromUnixMicros(row[2].as<int64_t>())};
    }
  }
  ASSERT_EQ(acked.size(), 3u);
  EXPECT_EQ(acked["k2"].first, 1);  // "ok": never failed
  absl::MutexLock lock(&mu);
  EXPECT_EQ(failed_at.count("k2"), 0u);
  for (const auto& [key, at_least] :
       {std::pair<std::string, absl::Duration>{"k0", absl::Seconds(2)},
        // The date has whole seconds: 2 s ahead at least when sent; the
        // answer took a little of it on its way.
        {"k1", absl::Milliseconds(1500)}}) {
    ASSERT_EQ(failed_at.count(key), 1u) << key;
    EXPECT_EQ(acked[key].first, 2) << key;
    EXPECT_GE(acked[key].second - failed_at[key], at_least) << key;
  }
}

// An endpoint killed mid-flow and started again on its port a second
// later: every item reaches it (at least once), none is dead-lettered, and
// each key's items arrive in order.
TEST_F(HandlersTest, HttpEndpointThatDiesAndComesBackLosesNothing) {
  CreateGroup("g", 4);
  std::unique_ptr<ChildProcess> receiver;
  const std::string port = StartReceiver(receiver);
  ASSERT_FALSE(port.empty());
  ProduceKeyed("g", 10, 100);
  timeout_ = absl::Seconds(10);  // the refused connection is bridged
  auto h = Build(absl::StrCat("http://127.0.0.1:", port, "/items"));
  ASSERT_TRUE(h.ok()) << h.status();
  ConsumerOptions o = OptionsFor("g", *h);
  // A refused connection spends no attempt; the request in flight at the
  // kill spends one.
  o.max_attempts = 3;
  auto c = Start(std::move(o));
  ASSERT_TRUE(
      WaitFor([&] { return LogLines(log_).size() >= 200; }, absl::Seconds(60)));
  receiver->Signal(SIGKILL);
  receiver->Wait(absl::Seconds(10));
  absl::SleepFor(absl::Milliseconds(500));  // the endpoint is down a while
  EXPECT_EQ(StartReceiver(receiver, port), port);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 0);
  std::set<std::string> ids;
  for (const auto& f : LogLines(log_)) ids.insert(f[0]);
  EXPECT_EQ(ids.size(), 1000u);
  for (const auto& [key, numbers] : NumbersByKey(4)) {
    // At least once: a repeat of the item in flight, never a step back
    // past it.
    for (size_t i = 1; i < numbers.size(); ++i) {
      EXPECT_LE(numbers[i - 1], numbers[i]) << key;
    }
  }
}

// A schema change under the prepared statement (its result type changes)
// and killed worker backends: each costs an attempt on the items in
// flight, none is lost or acknowledged twice, none is dead-lettered.
TEST_F(HandlersTest, SqlStatementSurvivesASchemaChangeAndKilledBackends) {
  CreateGroup("g", 4);
  ProduceKeyed("g", 10, 100);
  auto h = Build("sql:INSERT INTO app.log VALUES ($3, $1) RETURNING *");
  ASSERT_TRUE(h.ok()) << h.status();
  auto c = StartWith("g", *h);
  ASSERT_TRUE(
      WaitFor([&] { return Count("SELECT count(*) FROM app.log") > 200; },
              absl::Seconds(60)));
  ExecSql(db_.dsn(), "ALTER TABLE app.log ADD COLUMN note text");
  // Well past the ALTER before any backend is killed (a new backend would
  // prepare afresh and hide a statement that never recovers).
  ASSERT_TRUE(
      WaitFor([&] { return Count("SELECT count(*) FROM app.log") > 700; },
              absl::Seconds(60)));
  EXPECT_GT(Count("SELECT count(pg_terminate_backend(pid)) FROM "
                  "pg_stat_activity WHERE application_name LIKE "
                  "'sqlgroup-worker-%'"),
            0);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM app.log"), 1000);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM app.log"), 1000);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 0);
}

TEST_F(HandlersTest, WhatCannotRunIsRefusedBeforeAnyItem) {
  CreateGroup("g", 4);
  // The member's role may not write this table.
  ExecSql(db_.dsn(), "CREATE TABLE app.secret (id uuid)");
  const auto denied = Build("sql:INSERT INTO app.secret VALUES ($3)");
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(denied.status().message()),
              HasSubstr("the member's role may not run the statement: "
                        "permission denied for table secret"));
  // A program that is there, running a script that is not (a shell, which
  // fails at once: an interpreter's start-up on a loaded machine can outlast
  // the check's second, and then the refusal comes with the first item).
  const auto missing = Build("exec:sh /no/such/handler.sh");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("exited with status 2 before it was given any item"));
}

// An endpoint down for a while (503 to everything, as during its deploy),
// then fine, under consume's default retry policy: the member's circuit
// breaker stops handing it items after a few failures and tries one now
// and then, so the endpoint sees a few calls instead of a retry of every
// key's head, no item is dead-lettered, and every item gets through once
// it is back.
TEST_F(HandlersTest, AnEndpointDownForAWhileCostsAFewCallsAndNoDeadLetters) {
  CreateGroup("g", 4);
  std::remove((log_ + ".down").c_str());
  std::unique_ptr<ChildProcess> receiver;
  const std::string port = StartReceiver(receiver, "", "12");
  ASSERT_FALSE(port.empty());
  ProduceKeyed("g", 8, 5);
  ChildProcess member(
      {CliPath(), "consume", "--group", "g", "--handler",
       absl::StrCat("http://127.0.0.1:", port, "/items"), "--dsn", member_dsn_,
       "--metrics_addr", "", "--log_level", "info"},
      log_ + ".member");
  ASSERT_TRUE(Drained(absl::Seconds(120))) << member.Log();
  member.Signal(SIGTERM);
  EXPECT_EQ(member.Wait(absl::Seconds(30)), 0) << member.Log();
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 0);
  std::set<std::string> delivered;
  for (const auto& f : LogLines(log_)) delivered.insert(f[0]);
  EXPECT_EQ(delivered.size(), 40u);
  // 8 keys' heads, each retried at 1, 2, 4 and 8 s without the breaker:
  // about 32 calls in 12 s. With it: the failures that open it, then a
  // probe after 1, 2, 4 and 8 s.
  const size_t down_calls = LogLines(log_ + ".down").size();
  EXPECT_GE(down_calls, 5u);
  EXPECT_LE(down_calls, 14u) << member.Log();
  EXPECT_THAT(member.Log(), HasSubstr("(circuit open)"));
  EXPECT_THAT(member.Log(), HasSubstr("circuit closed"));
}

// A SQL function whose table is not there yet (its migration comes later
// in a deploy): every call fails with SQLSTATE 42P01, which says nothing of
// the items. The breaker holds them back instead of spending their
// attempts, and they all go through once the table is created.
TEST_F(HandlersTest, AFunctionWhoseTableComesLaterDeadLettersNothing) {
  CreateGroup("g", 4);
  ExecSql(db_.dsn(),
          absl::StrCat("CREATE FUNCTION app.keep(k text, p bytea, i uuid) "
                       "RETURNS void LANGUAGE plpgsql AS $$ BEGIN INSERT "
                       "INTO app.kept VALUES (i); END $$; GRANT EXECUTE ON "
                       "FUNCTION app.keep(text, bytea, uuid) TO ",
                       kMemberRole));
  ProduceKeyed("g", 8, 2);
  ChildProcess member(
      {CliPath(), "consume", "--group", "g", "--handler", "sql:app.keep",
       "--dsn", member_dsn_, "--metrics_addr", "", "--log_level", "info"},
      log_ + ".member");
  ASSERT_TRUE(WaitFor(
      [&] { return member.Log().find("(circuit open)") != std::string::npos; },
      absl::Seconds(30)))
      << member.Log();
  ExecSql(db_.dsn(),
          absl::StrCat("CREATE TABLE app.kept (id uuid); GRANT INSERT ON "
                       "app.kept TO ",
                       kMemberRole));
  ASSERT_TRUE(Drained(absl::Seconds(60))) << member.Log();
  member.Signal(SIGTERM);
  EXPECT_EQ(member.Wait(absl::Seconds(30)), 0) << member.Log();
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 0);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM app.kept"), 16);
  EXPECT_THAT(member.Log(), HasSubstr("SQLSTATE 42P01"));
}

// The exactly-once promise of the SQL handler, through the CLI: the member
// is killed with SIGKILL twice while it pays orders, and started again.
// Items of no key: a worker groups its calls of the function into one
// transaction, each under a savepoint (store/grouped_calls.h). A call that
// raises undoes only its own work and is retried or dead-lettered; the
// others commit together, each item once.
TEST_F(HandlersTest, SqlFunctionCallsOfItemsWithoutKeysCommitTogether) {
  CreateGroup("g", 4);
  std::map<int, std::string> words;
  for (int i = 0; i < 10; ++i) {
    words[i * 199] = "fail";
    words[i * 199 + 7] = "dead";
  }
  ProduceUnkeyed("g", 2000, words);
  auto h = Build("sql:app.note");
  ASSERT_TRUE(h.ok()) << h.status();
  const int64_t before = Commits();
  auto c = StartWith("g", *h, /*sql_calls_per_commit=*/32);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  ASSERT_TRUE(c->Stop().ok());  // its backends' counts reach the view
  const int64_t used = Commits() - before;
  EXPECT_EQ(Count("SELECT count(*) FROM app.seen"), 1980);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM app.seen"), 1980);
  EXPECT_EQ(Count("SELECT count(*) FROM app.seen WHERE in_ack"), 1980);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items WHERE attempts = "
                  "4 AND last_error LIKE '%failed (SQLSTATE P0001)%'"),
            10);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items WHERE attempts = "
                  "1 AND last_error LIKE '%cannot be handled%'"),
            10);
  // Every call, rolled back or not: each item once, a failing one once per
  // attempt (4) and a dead one once. A failed call that undid its group's
  // other calls would have them made again.
  EXPECT_EQ(Count("SELECT last_value FROM app.calls"), 1980 + 10 * 4 + 10);
  // A commit of its own each would be 2,000, besides the claims.
  std::printf("2,000 items in %lld transactions\n",
              static_cast<long long>(used));
  EXPECT_LT(used, 1200);
}

// Grouped calls whose worker connections keep being cut (a backend
// terminated in the middle of a transaction of calls, or while a failed
// call's release is written): the calls lost with a connection are made
// again, each item's work kept once, the member goes on, and only the
// items whose function always fails are dead-lettered.
TEST_F(HandlersTest, GroupedSqlCallsSurviveConnectionsCutMidTransaction) {
  CreateGroup("g", 4);
  std::map<int, std::string> words;
  for (int i = 0; i < 20; ++i) words[i * 149 + 3] = "fail";
  ProduceUnkeyed("g", 3000, words);
  auto h = Build("sql:app.note");
  ASSERT_TRUE(h.ok()) << h.status();
  auto c = StartWith("g", *h, /*sql_calls_per_commit=*/32);
  std::atomic<bool> cutting{true};
  std::atomic<int> cut{0};
  std::thread cutter([&] {
    pqxx::connection conn(db_.dsn());
    while (cutting) {
      cut += pqxx::nontransaction(conn)
                 .exec1(
                     "SELECT count(pg_terminate_backend(pid)) FROM "
                     "pg_stat_activity WHERE application_name LIKE "
                     "'sqlgroup-worker-%'")[0]
                 .as<int>();
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  // The cuts go on until half the items are handled, then the drain ends.
  EXPECT_TRUE(
      WaitFor([&] { return Count("SELECT count(*) FROM app.seen") >= 1500; },
              absl::Seconds(60)));
  cutting = false;
  cutter.join();
  ASSERT_TRUE(Drained(absl::Seconds(120)));
  ASSERT_TRUE(c->Stop().ok());
  std::printf("%d connections cut\n", cut.load());
  EXPECT_GT(cut.load(), 10);
  EXPECT_EQ(Count("SELECT count(*) FROM app.seen"), 2980);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM app.seen"), 2980);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items WHERE "
                  "last_error LIKE '%failed (SQLSTATE P0001)%'"),
            20);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 20);
}

// A call whose work breaks a deferred constraint fails only at COMMIT, and
// takes its group's COMMIT with it: those items are read again, and the
// worker's calls commit alone for a while, so that the one at fault fails
// alone and is dead-lettered; each other item's work is kept once.
TEST_F(HandlersTest, AGroupedCallRefusedAtCommitFailsAlone) {
  CreateGroup("g", 2);
  ProduceUnkeyed("g", 500, {{250, "twice"}});
  auto h = Build("sql:app.note_once");
  ASSERT_TRUE(h.ok()) << h.status();
  auto c = StartWith("g", *h, /*sql_calls_per_commit=*/32);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  ASSERT_TRUE(c->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM app.seen"), 499);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM app.seen"), 499);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items WHERE attempts = "
                  "4 AND last_error LIKE '%SQLSTATE 23505%'"),
            1);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 1);
}

// Grouped calls through kill -9: a transaction lost with its member takes
// its calls' work with it, and their items are handled again, once.
TEST_F(HandlersTest, GroupedSqlCallsAreExactlyOnceThroughKill9) {
  CreateGroup("g", 8, absl::Seconds(2));
  ProduceUnkeyed("g", 6000);
  const std::vector<std::string> argv = {CliPath(),
                                         "consume",
                                         "--group",
                                         "g",
                                         "--handler",
                                         "sql:app.note",
                                         "--workers",
                                         "2",
                                         "--dsn",
                                         member_dsn_,
                                         "--metrics_addr",
                                         "",
                                         "--log_level",
                                         "warn",
                                         "--sql_calls_per_commit",
                                         "32"};
  for (int round = 0; round < 3; ++round) {
    const int64_t before = Count("SELECT count(*) FROM app.seen");
    ChildProcess member(argv, log_ + ".member");
    ASSERT_TRUE(WaitFor(
        [&] { return Count("SELECT count(*) FROM app.seen") > before + 500; },
        absl::Seconds(60)))
        << member.Log();
    member.Signal(SIGKILL);
    member.Wait(absl::Seconds(10));
  }
  ChildProcess last(argv, log_ + ".member");
  ASSERT_TRUE(Drained(absl::Seconds(120))) << last.Log();
  last.Signal(SIGTERM);
  EXPECT_EQ(last.Wait(absl::Seconds(30)), 0) << last.Log();
  EXPECT_EQ(Count("SELECT count(*) FROM app.seen"), 6000);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM app.seen"), 6000);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 0);
}

TEST_F(HandlersTest, SqlHandlerIsExactlyOnceThroughKill9) {
  CreateGroup("g", 8, absl::Seconds(2));
  ProduceKeyed("g", 20, 150);
  const std::vector<std::string> argv = {
      CliPath(),        "consume",   "--group",     "g",     "--handler",
      "sql:app.pay",    "--workers", "2",           "--dsn", member_dsn_,
      "--metrics_addr", "",          "--log_level", "warn"};
  for (int round = 0; round < 2; ++round) {
    const int64_t before = Count("SELECT count(*) FROM app.seen");
    ChildProcess member(argv, log_ + ".member");
    // Killed mid-flow: after it has paid a few hundred more.
    ASSERT_TRUE(WaitFor(
        [&] { return Count("SELECT count(*) FROM app.seen") > before + 300; },
        absl::Seconds(60)))
        << member.Log();
    member.Signal(SIGKILL);
    member.Wait(absl::Seconds(10));
  }
  ChildProcess last(argv, log_ + ".member");
  ASSERT_TRUE(Drained(absl::Seconds(120))) << last.Log();
  last.Signal(SIGTERM);
  EXPECT_EQ(last.Wait(absl::Seconds(30)), 0) << last.Log();
  EXPECT_EQ(Count("SELECT count(*) FROM app.seen"), 3000);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM app.seen"), 3000);
  EXPECT_EQ(Count("SELECT count(*) FROM app.paid WHERE n = 150 AND "
                  "last_seq = 150 AND order_violations = 0"),
            20);
}

}  // namespace
}  // namespace sqlgroup::testing
