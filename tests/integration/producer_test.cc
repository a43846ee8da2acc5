// The producer side of exactly once (schema 10): a batch whose COMMIT was
// lost with the connection is sent again under its idempotency key and
// never added twice, whether its items still wait or were consumed since;
// idempotency keys through EnqueueIn and the SQL functions; and what a
// producer says when the database cannot be reached.
#include "sqlgroup/producer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <pqxx/pqxx>
#include <sstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "enqueue_fingerprint.h"
#include "spdlog/sinks/ostream_sink.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/private_postgres.h"
#include "store/member_store.h"
#include "support/notifications.h"
#include "support/pg_fixture.h"
#include "support/wait.h"

namespace sqlgroup::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ProducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    admin_ = MigratedAdmin(db_.dsn());
    ASSERT_NE(admin_, nullptr);
    ASSERT_TRUE(admin_->CreateGroup({.name = "g", .parts = 4}).ok());
    conn_ = std::make_unique<pqxx::connection>(db_.dsn());
  }

  void TearDown() override { SetSyncCommitWait(false); }

  int64_t Count(const std::string& sql) {
    pqxx::nontransaction tx(*conn_);
    return tx.exec1(sql)[0].as<int64_t>();
  }

  // With a synchronous standby that does not exist, a COMMIT is durable
  // here but waits for the standby: the window in which to cut the
  // connection, so the client cannot know that it committed.
  void SetSyncCommitWait(bool on) {
    pqxx::nontransaction tx(*conn_);
    tx.exec(on ? "ALTER SYSTEM SET synchronous_standby_names = 'nobody'"
               : "ALTER SYSTEM RESET synchronous_standby_names");
    tx.exec("SELECT pg_reload_conf()");
  }

  // Enqueues `n` keyed items with a producer whose first COMMIT is cut
  // (after it is durable); `between` runs while the commit's outcome is
  // unknown to the producer, and before its retry can claim the batch's
  // key (held back by a lock on sqlgroup.enqueue_keys). Returns what
  // Enqueue returned.
  absl::StatusOr<std::vector<std::string>> EnqueueThroughALostCommit(
      int n, const std::function<void()>& between) {
    // The test cluster runs with synchronous_commit off, which never waits
    // for a standby; the producer's sessions get it on, and start after
    // the missing standby is configured.
    pqxx::nontransaction(*conn_).exec(
        absl::StrCat("ALTER DATABASE ", conn_->quote_name(db_.name()),
                     " SET synchronous_commit = on"));
    SetSyncCommitWait(true);
    auto producer = Producer::Create(
        {.dsn = db_.dsn(), .group = "g", .retry_for = absl::Seconds(60)});
    EXPECT_TRUE(producer.ok()) << producer.status();
    std::vector<NewItem> items;
    for (int i = 0; i < n; ++i) {
      items.push_back({.key = absl::StrCat("k", i % 3),
                       .payload = absl::StrCat("item ", i)});
    }
    auto result = std::async(std::launch::async,
                             [&] { return (*producer)->Enqueue(items); });
    // The producer's COMMIT waits for the standby: cut it there.
    EXPECT_TRUE(WaitFor(
        [&] {
          return Count(
                     "SELECT count(*) FROM pg_stat_activity WHERE "
                     "application_name = 'sqlgroup-producer' AND "
                     "wait_event = 'SyncRep'") == 1;
        },
        absl::Seconds(20)));
    // Queued for the key table before the cut (the waiting commit still
    // holds its lock), so granted before the producer's retry asks.
    pqxx::connection holder(db_.dsn());
    pqxx::work hold(holder);
    auto locked = std::async(std::launch::async, [&] {
      hold.exec("LOCK TABLE sqlgroup.enqueue_keys IN EXCLUSIVE MODE");
    });
    EXPECT_TRUE(WaitFor(
        [&] {
          return Count(
                     "SELECT count(*) FROM pg_locks l JOIN pg_class c ON "
                     "c.oid = l.relation WHERE c.relname = 'enqueue_keys' "
                     "AND l.mode = 'ExclusiveLock'") == 1;
        },
        absl::Seconds(20)));
    EXPECT_EQ(Count("SELECT count(pg_terminate_backend(pid)) FROM "
                    "pg_stat_activity WHERE application_name = "
                    "'sqlgroup-producer' AND wait_event = 'SyncRep'"),
              1);
    locked.get();
    // Committed here, though its client never heard so.
    EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), n);
    between();
    hold.commit();
    SetSyncCommitWait(false);
    auto ids = result.get();
    EXPECT_GE((*producer)->retries(), 1);
    return ids;
  }

  TestDatabase db_;
  std::unique_ptr<Admin> admin_;
  std::unique_ptr<pqxx::connection> conn_;
};

TEST_F(ProducerTest, ABatchWhoseCommitWasLostIsNotAddedAgain) {
  auto ids = EnqueueThroughALostCommit(50, [] {});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 50u);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 50);
  // The ids returned are the ones that committed.
  pqxx::nontransaction tx(*conn_);
  EXPECT_EQ(tx.exec_params1("SELECT count(*) FROM sqlgroup.items WHERE id = "
                            "ANY($1::uuid[])",
                            absl::StrCat("{", absl::StrJoin(*ids, ","), "}"))[0]
                .as<int>(),
            50);
}

TEST_F(ProducerTest, ABatchConsumedBeforeTheRetryIsNotAddedAgain) {
  // A consumer acknowledges (deletes) the items before the producer can
  // ask again: the retry must still add nothing.
  auto ids = EnqueueThroughALostCommit(20, [&] {
    pqxx::nontransaction(*conn_).exec("DELETE FROM sqlgroup.items");
  });
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 20u);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 0);
}

TEST_F(ProducerTest, BatchesAfterARetryAreNewAndOnlyTheLastKeyIsKept) {
  auto producer = Producer::Create({.dsn = db_.dsn(), .group = "g"});
  ASSERT_TRUE(producer.ok());
  for (int i = 0; i < 5; ++i) {
    // The same items each time: five batches, not one.
    ASSERT_TRUE((*producer)->Enqueue({{.payload = "same"}}).ok());
  }
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 5);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.enqueue_keys"), 1);
  producer->reset();  // goes away: its last key with it
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.enqueue_keys"), 0);
}

TEST_F(ProducerTest, AnIdempotencyKeyAddsItsItemsOnce) {
  const std::vector<NewItem> items = {{.key = "user-7", .payload = "a"},
                                      {.payload = "b"}};
  auto in_tx = [&] {
    pqxx::work tx(*conn_);
    auto ids = Producer::EnqueueIn(tx, "g", items,
                                   EnqueueOptions{.idempotency_key = "req-1"});
    tx.commit();
    return ids;
  };
  auto first = in_tx();
  ASSERT_TRUE(first.ok()) << first.status();
  auto again = in_tx();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 2);
  pqxx::nontransaction(*conn_).exec("DELETE FROM sqlgroup.items");  // consumed
  auto later = in_tx();
  EXPECT_EQ(*later, *first);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 0);
  // Another key is another request.
  pqxx::work tx(*conn_);
  ASSERT_TRUE(Producer::EnqueueIn(tx, "g", items,
                                  EnqueueOptions{.idempotency_key = "req-2"})
                  .ok());
  tx.commit();
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 2);
}

TEST_F(ProducerTest, TheSqlFunctionsTakeAnIdempotencyKey) {
  pqxx::connection client(db_.dsn());
  pqxx::nontransaction tx(client);
  const std::string one =
      tx.exec1(
            "SELECT sqlgroup.enqueue('g', 'k', 'x', '0', 'order-17')::text")[0]
          .as<std::string>();
  EXPECT_EQ(
      tx.exec1(
            "SELECT sqlgroup.enqueue('g', 'k', 'x', '0', 'order-17')::text")[0]
          .as<std::string>(),
      one);
  tx.exec("DELETE FROM sqlgroup.items");
  EXPECT_EQ(
      tx.exec1(
            "SELECT sqlgroup.enqueue('g', 'k', 'x', '0', 'order-17')::text")[0]
          .as<std::string>(),
      one);
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 0);
  const auto many = tx.exec(
      "SELECT * FROM sqlgroup.enqueue_many('g', ARRAY['a', NULL], "
      "ARRAY['1', '2']::bytea[], '0', 'batch-9')");
  const auto repeat = tx.exec(
      "SELECT * FROM sqlgroup.enqueue_many('g', ARRAY['a', NULL], "
      "ARRAY['1', '2']::bytea[], '0', 'batch-9')");
  ASSERT_EQ(many.size(), 2u);
  ASSERT_EQ(repeat.size(), 2u);
  EXPECT_EQ(many[0][0].as<std::string>(), repeat[0][0].as<std::string>());
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 2);
  // Without a key (NULL, or the older signatures): every call enqueues.
  tx.exec("SELECT sqlgroup.enqueue('g', 'k', 'x', '0', NULL)");
  tx.exec("SELECT sqlgroup.enqueue('g', 'k', 'x', '0', NULL)");
  tx.exec("SELECT sqlgroup.enqueue('g', 'k', 'x')");
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 5);
}

// A key used again with other items (schema 16): refused with a sentence,
// nothing added, from C++ and from SQL alike; the same items again still
// return the first ids.
TEST_F(ProducerTest, AKeyUsedAgainWithOtherItemsIsRefused) {
  const std::vector<NewItem> items = {{.key = "user-7", .payload = "a"},
                                      {.payload = "b"}};
  auto in_tx = [&](const std::vector<NewItem>& these, const std::string& key) {
    pqxx::work tx(*conn_);
    auto ids = Producer::EnqueueIn(tx, "g", these,
                                   EnqueueOptions{.idempotency_key = key});
    if (ids.ok()) tx.commit();
    return ids;
  };
  auto first = in_tx(items, "req-1");
  ASSERT_TRUE(first.ok()) << first.status();
  for (const std::vector<NewItem>& other : std::vector<std::vector<NewItem>>{
           {{.key = "user-7", .payload = "A"}, {.payload = "b"}},
           {{.key = "user-8", .payload = "a"}, {.payload = "b"}},
           {{.payload = "a"}, {.payload = "b"}},
           {{.key = "user-7", .payload = "a"}},
           {{.key = "user-7", .payload = "a"},
            {.payload = "b", .delay = absl::Seconds(5)}}}) {
    auto refused = in_tx(other, "req-1");
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status().message(),
                HasSubstr("idempotency key \"req-1\" of group g was used at"));
    EXPECT_THAT(refused.status().message(),
                HasSubstr("for other items (2 of them)"));
  }
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 2);
  EXPECT_EQ(*in_tx(items, "req-1"), *first);

  // The same bytes as the SQL function's, so a key used from both sides
  // is checked alike.
  std::string sql_first;
  {
    pqxx::nontransaction tx(*conn_);
    EXPECT_EQ(tx.exec1("SELECT encode(sqlgroup.enqueue_fingerprint("
                       "ARRAY['user-7', NULL], ARRAY['a', 'b']::bytea[], "
                       "ARRAY[0, 0]::bigint[]), 'hex')")[0]
                  .as<std::string>(),
              absl::BytesToHexString(EnqueueFingerprint(items)));
    sql_first =
        tx.exec1(
              "SELECT sqlgroup.enqueue('g', 'k', 'x', '30s', 'order-17')::"
              "text")[0]
            .as<std::string>();
    EXPECT_EQ(tx.exec1("SELECT sqlgroup.enqueue('g', 'k', 'x', '30s', "
                       "'order-17')::text")[0]
                  .as<std::string>(),
              sql_first);
    try {
      tx.exec("SELECT sqlgroup.enqueue('g', 'k', 'y', '30s', 'order-17')");
      ADD_FAILURE() << "the SQL function took other items under a used key";
    } catch (const pqxx::sql_error& e) {
      EXPECT_EQ(e.sqlstate(), "22023");
      EXPECT_THAT(e.what(), HasSubstr("was used at"));
    }
  }
  // From C++, the SQL call's items under its key: the same ids.
  pqxx::work both(*conn_);
  auto cpp = Producer::EnqueueIn(
      both, "g", {{.key = "k", .payload = "x", .delay = absl::Seconds(30)}},
      EnqueueOptions{.idempotency_key = "order-17"});
  ASSERT_TRUE(cpp.ok()) << cpp.status();
  EXPECT_EQ(*cpp, std::vector<std::string>{sql_first});
}

TEST_F(ProducerTest, AnUnreachableDatabaseIsReportedAsASentenceAfterRetryFor) {
  auto producer = Producer::Create(
      {.dsn = db_.dsn(), .group = "g", .retry_for = absl::Seconds(2)});
  ASSERT_TRUE(producer.ok());
  // From another database: a database cannot shut itself off.
  pqxx::connection server(SharedPostgres().Dsn());
  pqxx::nontransaction tx(server);
  tx.exec(absl::StrCat("ALTER DATABASE ", server.quote_name(db_.name()),
                       " ALLOW_CONNECTIONS false"));
  tx.exec(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
      "application_name = 'sqlgroup-producer'");
  const absl::Time start = absl::Now();
  auto ids = (*producer)->Enqueue({{.payload = "x"}});
  tx.exec(absl::StrCat("ALTER DATABASE ", server.quote_name(db_.name()),
                       " ALLOW_CONNECTIONS true"));
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  EXPECT_THAT(ids.status().message(),
              HasSubstr("could not enqueue a batch of 1 item(s) into group "
                        "'g' within 2s"));
  EXPECT_THAT(ids.status().message(),
              HasSubstr("Nothing of the batch was enqueued"));
  // Reachable again: the next call goes through.
  EXPECT_TRUE((*producer)->Enqueue({{.payload = "y"}}).ok());
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"), 1);
}

// A server that refuses more connections (SQLSTATE 53300, here the role's
// connection limit) is waited out for retry_for, then reported in a
// sentence that names the reason; once it accepts again, the same
// producer goes on.
TEST(ProducerRefused, ATooManyConnectionsRefusalIsWaitedOutThenReported) {
  TestRole role;  // declared first: dropped after the database
  TestDatabase db;
  auto admin = MigratedAdmin(db.dsn());
  ASSERT_NE(admin, nullptr);
  ASSERT_TRUE(admin->CreateGroup({.name = "g", .parts = 4}).ok());
  ASSERT_TRUE(admin->GrantRoles({.producer_role = role.name()}).ok());
  auto producer = Producer::Create({.dsn = role.Dsn(db.name()),
                                    .group = "g",
                                    .retry_for = absl::Seconds(2)});
  ASSERT_TRUE(producer.ok()) << producer.status();
  ASSERT_TRUE((*producer)->Enqueue({{.payload = "first"}}).ok());
  pqxx::connection server(db.dsn());
  pqxx::nontransaction tx(server);
  tx.exec(absl::StrCat("ALTER ROLE ", server.quote_name(role.name()),
                       " CONNECTION LIMIT 0"));
  tx.exec_params(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
      "usename = $1",
      role.name());
  auto refused = (*producer)->Enqueue({{.payload = "second"}});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("could not enqueue a batch of 1 item(s) into group "
                        "'g' within 2s"));
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("too many connections for role"));
  tx.exec(absl::StrCat("ALTER ROLE ", server.quote_name(role.name()),
                       " CONNECTION LIMIT -1"));
  EXPECT_TRUE((*producer)->Enqueue({{.payload = "third"}}).ok());
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM sqlgroup.items")[0].as<int>(), 2);
}

// A database restarted (immediate: a crash and recovery) under a producer
// enqueuing batch after batch: every call returns the batch's ids, each
// batch is in once, and what the producer said while it waited reads as
// sentences (no libpq internals).
TEST(ProducerRestart, ADatabaseRestartIsRiddenOutAndToldPlainly) {
  auto pg = PrivatePostgres::Start({});
  ASSERT_TRUE(pg.ok()) << pg.status();
  auto admin = MigratedAdmin((*pg)->Dsn());
  ASSERT_NE(admin, nullptr);
  ASSERT_TRUE(admin->CreateGroup({.name = "g", .parts = 4}).ok());
  admin.reset();
  std::ostringstream said;
  auto logger = std::make_shared<spdlog::logger>(
      "producer", std::make_shared<spdlog::sinks::ostream_sink_mt>(said));
  auto producer = Producer::Create({.dsn = (*pg)->Dsn(),
                                    .group = "g",
                                    .retry_for = absl::Seconds(60),
                                    .logger = logger});
  ASSERT_TRUE(producer.ok()) << producer.status();
  // The producer enqueues on a thread of its own; the restart runs on
  // this one (the server's postmaster is tied to the thread that starts
  // it).
  std::atomic<bool> restarted = false;
  std::atomic<int> batches = 0;
  absl::Status failed;
  std::thread enqueuer([&] {
    while (!restarted || batches < 20) {
      auto ids = (*producer)->Enqueue(
          {{.key = "k", .payload = absl::StrCat(batches.load())}});
      if (!ids.ok()) {
        failed = ids.status();
        return;
      }
      ++batches;
    }
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_TRUE((*pg)->Restart(/*immediate=*/true).ok());
  restarted = true;
  enqueuer.join();
  ASSERT_TRUE(failed.ok()) << failed;
  pqxx::connection conn((*pg)->Dsn());
  pqxx::nontransaction tx(conn);
  EXPECT_EQ(tx.exec1("SELECT count(*) FROM sqlgroup.items")[0].as<int>(),
            batches);
  EXPECT_GE((*producer)->retries(), 1);
  logger->flush();
  EXPECT_THAT(said.str(), HasSubstr("retrying for up to 1m, without "
                                    "duplicating the batch"));
  EXPECT_THAT(said.str(), HasSubstr("got through after"));
  EXPECT_THAT(said.str(), Not(HasSubstr("client encoding")));
  EXPECT_THAT(said.str(), Not(HasSubstr("check manually")));
}

// An enqueue says where its items are, so that only their parts' owners
// wake; a transaction of many enqueues sends a bounded number of
// announcements, counted together with the SQL functions'.
TEST_F(ProducerTest, EnqueueInAnnouncesWhereItsItemsAreBoundedPerTransaction) {
  pqxx::connection listener(db_.dsn());
  Announcements announcements(listener);
  std::vector<std::string> expected;
  {
    pqxx::work tx(*conn_);
    auto three = Producer::EnqueueIn(tx, "g",
                                     {{.key = "a", .payload = "1"},
                                      {.payload = "2"},
                                      {.key = "b", .payload = "3"}});
    ASSERT_TRUE(three.ok()) << three.status();
    expected.push_back(store::ItemsArrivedIn("g", *three));
    // More prefixes than one announcement names (40 keys, spread over the
    // key space by their hash): a plain one.
    std::vector<NewItem> many;
    for (int i = 0; i < 40; ++i) {
      many.push_back({.key = absl::StrCat("many", i), .payload = "x"});
    }
    ASSERT_TRUE(Producer::EnqueueIn(tx, "g", many).ok());
    expected.push_back(store::ItemsArrived("g"));
    // The SQL function's calls count with the producer's.
    for (int i = 1; i < store::kMaxTargetedAnnouncements; ++i) {
      const std::string id =
          tx.exec_params1("SELECT sqlgroup.enqueue('g', $1, 'x')::text",
                          absl::StrCat("k", i))[0]
              .as<std::string>();
      expected.push_back(store::ItemsArrivedIn("g", {id}));
    }
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(
          Producer::EnqueueIn(tx, "g", {{.key = "c", .payload = "y"}}).ok());
    }
    tx.commit();
  }
  // Distinct payloads only: PostgreSQL folds repeats within a transaction.
  std::vector<std::string> distinct;
  for (const std::string& p : expected) {
    if (std::find(distinct.begin(), distinct.end(), p) == distinct.end()) {
      distinct.push_back(p);
    }
  }
  EXPECT_EQ(announcements.Heard(*conn_), distinct);
}

}  // namespace
}  // namespace sqlgroup::testing
