// Keyed items against a real PostgreSQL: every item of a key lands in one
// part, and members hand a key's items to handlers one at a time, in
// enqueue order, through failures with backoff, batches and a rebalance
// with an item in flight, while other keys of the same part go on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <pqxx/pqxx>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "key_placement.h"
#include "keyspace.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/producer.h"
#include "support/consumer_fixture.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using testing::WaitFor;

// Payloads are "KEY:SEQ", SEQ counting a key's items from 0 in enqueue
// order.
struct Seq {
  std::string key;
  int seq = 0;
};
Seq ParsePayload(const std::string& payload) {
  const std::pair<std::string, std::string> f =
      absl::StrSplit(payload, absl::MaxSplits(':', 1));
  Seq s{f.first, -1};
  EXPECT_TRUE(absl::SimpleAtoi(f.second, &s.seq)) << payload;
  return s;
}

// Tracks which keys are with a handler: a key handed out twice at once,
// or out of order, is counted.
class KeyWatch {
 public:
  void Begin(const Seq& s) {
    absl::MutexLock lock(&mu_);
    if (!in_flight_.insert(s.key).second) ++concurrent_;
    most_ = std::max(most_, in_flight_.size());
  }
  // Waits up to `timeout` until `n` keys are with handlers at once.
  bool AwaitKeysInFlight(size_t n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return most_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  size_t most() const {
    absl::MutexLock lock(&mu_);
    return most_;
  }
  void End(const Seq& s) {
    absl::MutexLock lock(&mu_);
    in_flight_.erase(s.key);
  }
  int concurrent() const {
    absl::MutexLock lock(&mu_);
    return concurrent_;
  }

 private:
  mutable absl::Mutex mu_;
  std::set<std::string> in_flight_ ABSL_GUARDED_BY(mu_);
  int concurrent_ ABSL_GUARDED_BY(mu_) = 0;
  size_t most_ ABSL_GUARDED_BY(mu_) = 0;  // keys with handlers at once
};

class KeyOrderTest : public testing::ConsumerFixture {
 protected:
  void SetUp() override {
    ConsumerFixture::SetUp();
    pqxx::work tx(*conn_);
    // No unique constraint: a double acknowledgement shows.
    tx.exec(
        "CREATE TABLE acks (key text NOT NULL, seq int NOT NULL, "
        "id uuid NOT NULL, acked_at timestamptz NOT NULL DEFAULT "
        "clock_timestamp())");
    tx.exec(
        absl::StrCat("GRANT INSERT, SELECT ON acks TO ", testing::kMemberRole));
    tx.commit();
  }

  // `per_key` items of each of `keys` keys, enqueued in `calls` rounds
  // (every round a call with the next items of every key).
  void ProduceKeyed(const std::string& group, int keys, int per_key,
                    int calls = 1) {
    auto p = Producer::Create({.dsn = db_.dsn(), .group = group});
    ASSERT_TRUE(p.ok()) << p.status();
    int seq = 0;
    for (int c = 0; c < calls; ++c) {
      std::vector<NewItem> items;
      const int until = per_key * (c + 1) / calls;
      for (; seq < until; ++seq) {
        for (int k = 0; k < keys; ++k) {
          const std::string key = absl::StrCat("key-", k);
          items.push_back({.key = key, .payload = absl::StrCat(key, ":", seq)});
        }
      }
      ASSERT_TRUE((*p)->Enqueue(items).ok());
    }
  }

  // `long_items` items of the key `long_key` and `per_key` of each of `keys`
  // others, interleaved as one stream would bring them, in one call.
  void ProduceWithLongKey(const std::string& group, const std::string& long_key,
                          int long_items, int keys, int per_key) {
    auto p = Producer::Create({.dsn = db_.dsn(), .group = group});
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<NewItem> items;
    for (int seq = 0; seq < long_items; ++seq) {
      items.push_back(
          {.key = long_key, .payload = absl::StrCat(long_key, ":", seq)});
      if (seq >= per_key) continue;
      for (int k = 0; k < keys; ++k) {
        const std::string key = absl::StrCat("key-", k);
        items.push_back({.key = key, .payload = absl::StrCat(key, ":", seq)});
      }
    }
    ASSERT_TRUE((*p)->Enqueue(items).ok());
  }

  // Records the item in `acks` inside the acknowledging transaction.
  static void RecordAck(const Item& item, AckTransaction& ack) {
    const Seq s = ParsePayload(item.payload);
    ack.work().exec_params(
        "INSERT INTO acks (key, seq, id) VALUES ($1, $2, $3::uuid)", s.key,
        s.seq, item.id);
  }

  // A batch handler's failures for the order tests: every fifth batch of
  // more than one item fails (its items are tried singly, in order), and
  // some items fail alone once too (their key backs off with the rest of
  // its run unhandled). OK when the batch is to succeed.
  static absl::Status SomeBatchesFail(const std::vector<Item>& items,
                                      std::atomic<int>& batches,
                                      std::atomic<int>& single_failures) {
    if (items.size() > 1 && batches.fetch_add(1) % 5 == 0) {
      return absl::InternalError("batch fails");
    }
    if (items.size() == 1 && items[0].attempt == 1 &&
        ParsePayload(items[0].payload).seq % 7 == 3) {
      ++single_failures;
      return absl::InternalError("fails alone once");
    }
    return absl::OkStatus();
  }

  // Keys whose acknowledgements, in commit order (the database clock in
  // the ack; a key's next item is handed out only after the previous ack
  // committed), are not exactly 0, 1, 2, ...
  int64_t OutOfOrderKeys(int per_key) {
    return Count(absl::StrCat(
        "SELECT count(*) FROM (SELECT key, array_agg(seq ORDER BY acked_at) "
        "AS seqs FROM acks GROUP BY key) a WHERE seqs <> ARRAY(SELECT "
        "generate_series(0, ",
        per_key - 1, "))"));
  }

  // As OutOfOrderKeys, for keys with any number of items: keys whose
  // acknowledgements are not 0, 1, 2, ... up to their count.
  int64_t KeysAckedOutOfOrder() {
    return Count(
        "SELECT count(*) FROM (SELECT key, array_agg(seq ORDER BY acked_at) "
        "AS s, count(*) AS n FROM acks GROUP BY key) a WHERE s <> "
        "ARRAY(SELECT generate_series(0, a.n::int - 1))");
  }

  void SetOrdering(const std::string& group, const std::string& ordering) {
    pqxx::work tx(*conn_);
    tx.exec_params("UPDATE sqlgroup.groups SET ordering = $2 WHERE name = $1",
                   group, ordering);
    tx.commit();
  }
};

TEST_F(KeyOrderTest, EveryItemOfAKeyLandsInOnePartForEveryPartCount) {
  for (int parts : {3, 16, 40, 4096}) {
    const std::string group = absl::StrCat("place", parts);
    CreateGroup(group, parts);
    ProduceKeyed(group, 50, 6, 3);
    pqxx::nontransaction tx(*conn_);
    std::map<std::string, std::set<int>> parts_of;
    for (const auto& row : tx.exec_params(
             "SELECT key, id::text FROM sqlgroup.items WHERE group_name = $1",
             group)) {
      const Uuid128 id = *ParseUuid(row[1].as<std::string>());
      parts_of[row[0].as<std::string>()].insert(PartOf(id, parts));
      EXPECT_EQ(BlockOf(id), KeyBlock(row[0].as<std::string>()));
    }
    ASSERT_EQ(parts_of.size(), 50u);
    for (const auto& [key, in] : parts_of) {
      EXPECT_EQ(in.size(), 1u)
          << key << " in " << in.size() << " parts of " << parts;
    }
  }
}

TEST_F(KeyOrderTest, AKeysItemsAreHandledOneAtATimeInEnqueueOrder) {
  CreateGroup("g", 2);
  constexpr int kKeys = 12, kPerKey = 25;
  ProduceKeyed("g", kKeys, kPerKey, 5);
  KeyWatch watch;
  ConsumerOptions o = Options("g", [&](const Item& item, AckTransaction& ack) {
    const Seq s = ParsePayload(item.payload);
    watch.Begin(s);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    RecordAck(item, ack);
    watch.End(s);
    return absl::OkStatus();
  });
  o.workers = 4;
  auto c = Start(o);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  EXPECT_TRUE(c->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM acks"), kKeys * kPerKey);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM acks"), kKeys * kPerKey);
  EXPECT_EQ(OutOfOrderKeys(kPerKey), 0);
  EXPECT_EQ(watch.concurrent(), 0);
}

TEST_F(KeyOrderTest, TheKeysOfOnePartRunOnSeveralWorkersAtOnce) {
  CreateGroup("g", 1);
  constexpr int kKeys = 6, kPerKey = 4;
  ProduceKeyed("g", kKeys, kPerKey);
  KeyWatch watch;
  std::atomic<bool> met{false};
  ConsumerOptions o = Options("g", [&](const Item& item, AckTransaction& ack) {
    const Seq s = ParsePayload(item.payload);
    watch.Begin(s);
    // The first items wait (up to a bound) until three keys of the one
    // part are with handlers together: only parallel keys get there.
    if (s.seq == 0 && watch.AwaitKeysInFlight(3, absl::Seconds(5))) met = true;
    RecordAck(item, ack);
    watch.End(s);
    return absl::OkStatus();
  });
  o.workers = 4;
  o.max_connections = 5;  // every worker on a connection of its own
  auto c = Start(o);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  EXPECT_TRUE(c->Stop().ok());
  EXPECT_TRUE(met.load()) << "at most " << watch.most() << " keys at once";
  EXPECT_EQ(watch.concurrent(), 0);
  EXPECT_EQ(OutOfOrderKeys(kPerKey), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM acks"), kKeys * kPerKey);
}

TEST_F(KeyOrderTest, ASlowItemHoldsUpOnlyItsOwnKey) {
  CreateGroup("g", 1);
  constexpr int kKeys = 5, kPerKey = 8;
  ProduceKeyed("g", kKeys, kPerKey);
  std::atomic<bool> others_done_meanwhile{false};
  std::atomic<int> others_handled{0};
  ConsumerOptions o = Options("g", [&](const Item& item, AckTransaction& ack) {
    const Seq s = ParsePayload(item.payload);
    if (s.key == "key-0" && s.seq == 0) {
      // Stays with its handler until every other key's items were handed
      // out (or a bound passes): they must not wait for it. A key's next
      // item comes only after the previous one's ack committed.
      others_done_meanwhile = WaitFor(
          [&] { return others_handled.load() == (kKeys - 1) * kPerKey; },
          absl::Seconds(20));
    }
    RecordAck(item, ack);
    if (s.key != "key-0") ++others_handled;
    return absl::OkStatus();
  });
  o.workers = 2;
  auto c = Start(o);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  EXPECT_TRUE(c->Stop().ok());
  EXPECT_TRUE(others_done_meanwhile.load());
  EXPECT_EQ(OutOfOrderKeys(kPerKey), 0);
}

TEST_F(KeyOrderTest, AFailingHeadHoldsBackOnlyItsKey) {
  CreateGroup("g", 1);  // every key in the one part
  constexpr int kKeys = 6, kPerKey = 10;
  ProduceKeyed("g", kKeys, kPerKey);
  // key-0's item 3 fails twice: its key waits for the retry (item 4 must
  // not pass it), while the other keys of the part go on.
  std::atomic<int> failures{0};
  ConsumerOptions o = Options("g", [&](const Item& item, AckTransaction& ack) {
    const Seq s = ParsePayload(item.payload);
    if (s.key == "key-0" && s.seq == 3 && item.attempt <= 2) {
      ++failures;
      return absl::InternalError("fails twice");
    }
    RecordAck(item, ack);
    return absl::OkStatus();
  });
  o.backoff_initial = absl::Milliseconds(300);
  o.backoff_max = absl::Milliseconds(600);
  auto c = Start(o);
  ASSERT_TRUE(Drained(absl::Seconds(30)));
  EXPECT_TRUE(c->Stop().ok());
  EXPECT_EQ(failures.load(), 2);
  EXPECT_EQ(OutOfOrderKeys(kPerKey), 0);
  EXPECT_EQ(Count("SELECT count(*) FROM acks"), kKeys * kPerKey);
  // The other keys finished while key-0 waited out its backoffs.
  EXPECT_EQ(Count("SELECT count(*) FROM acks WHERE key <> 'key-0' AND "
                  "acked_at > (SELECT acked_at FROM acks WHERE key = 'key-0' "
                  "AND seq = 3)"),
            0);
}

TEST_F(KeyOrderTest, ADeadLetteredItemReleasesTheNextOfItsKey) {
  CreateGroup("g", 1);
  constexpr int kPerKey = 5;
  ProduceKeyed("g", 2, kPerKey);
  ConsumerOptions o = Options("g", [&](const Item& item, AckTransaction& ack) {
    const Seq s = ParsePayload(item.payload);
    if (s.key == "key-1" && s.seq == 2) return absl::InternalError("poison");
    RecordAck(item, ack);
    return absl::OkStatus();
  });
  o.max_attempts = 2;
  o.backoff_initial = absl::Milliseconds(300);
  auto c = Start(o);
  ASSERT_TRUE(Drained(absl::Seconds(30)));
  EXPECT_TRUE(c->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.dead_items"), 1);
  EXPECT_EQ(Count("SELECT count(*) FROM (SELECT array_agg(seq ORDER BY "
                  "acked_at) AS s FROM acks WHERE key = 'key-1') a "
                  "WHERE s = ARRAY[0, 1, 3, 4]"),
            1);
  // Item 3 waited for item 2 to die.
  EXPECT_EQ(Count("SELECT count(*) FROM acks WHERE key = 'key-1' AND seq = 3 "
                  "AND acked_at > (SELECT died_at FROM sqlgroup.dead_items)"),
            1);
}

TEST_F(KeyOrderTest, ABatchCarriesRunsOfAKeyInOrder) {
  CreateGroup("g", 2);
  constexpr int kKeys = 3, kPerKey = 200;
  ProduceKeyed("g", kKeys, kPerKey, 4);
  std::atomic<int> multi_item_runs{0};
  std::atomic<int> failed_batches{0};
  std::atomic<int> single_failures{0};
  ConsumerOptions o = Options("g", nullptr);
  o.handler = nullptr;
  o.batch_handler = [&](const std::vector<Item>& items, AckTransaction& ack) {
    std::map<std::string, int> per_key;
    for (const Item& item : items) ++per_key[ParsePayload(item.payload).key];
    for (const auto& [key, n] : per_key) multi_item_runs += n > 1;
    absl::Status fail = SomeBatchesFail(items, failed_batches, single_failures);
    if (!fail.ok()) return fail;
    for (const Item& item : items) RecordAck(item, ack);
    return absl::OkStatus();
  };
  auto c = Start(o);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  EXPECT_TRUE(c->Stop().ok());
  EXPECT_GT(multi_item_runs.load(), 0);
  EXPECT_GT(single_failures.load(), 0);
  EXPECT_EQ(Count("SELECT count(DISTINCT id) FROM acks"), kKeys * kPerKey);
  EXPECT_EQ(Count("SELECT count(*) FROM acks"), kKeys * kPerKey);
  EXPECT_EQ(OutOfOrderKeys(kPerKey), 0);
}

// A batch handler that writes nothing is acknowledged by the fenced delete
// alone, which carries the part's next claim (ClaimRuns) in the same
// statement: the runs keep their keys' order through failed batches and
// items that fail alone, as claims made on their own do.
TEST_F(KeyOrderTest, AnAckThatCarriesTheNextClaimKeepsEachKeysOrder) {
  CreateGroup("g", 2);
  constexpr int kKeys = 3, kPerKey = 300;
  ProduceKeyed("g", kKeys, kPerKey, 4);
  absl::Mutex mu;
  std::map<std::string, std::vector<int>> handled;  // successes, in order
  std::atomic<int> batches{0};
  std::atomic<int> single_failures{0};
  ConsumerOptions o = Options("g", nullptr);
  o.handler = nullptr;
  o.claim_batch = 25;
  o.batch_handler = [&](const std::vector<Item>& items, AckTransaction&) {
    absl::Status fail = SomeBatchesFail(items, batches, single_failures);
    if (!fail.ok()) return fail;
    absl::MutexLock lock(&mu);
    for (const Item& item : items) {
      const Seq s = ParsePayload(item.payload);
      handled[s.key].push_back(s.seq);
    }
    return absl::OkStatus();
  };
  auto c = Start(o);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  const ConsumerStats stats = c->stats();
  EXPECT_TRUE(c->Stop().ok());
  EXPECT_GT(stats.carried_claims, 0);
  EXPECT_GT(single_failures.load(), 0);
  std::vector<int> in_order(kPerKey);
  for (int i = 0; i < kPerKey; ++i) in_order[i] = i;
  absl::MutexLock lock(&mu);
  ASSERT_EQ(handled.size(), static_cast<size_t>(kKeys));
  for (const auto& [key, seqs] : handled) EXPECT_EQ(seqs, in_order) << key;
}

TEST_F(KeyOrderTest, ABatchHandlerGivesALongKeyTurnsWithTheOtherKeys) {
  CreateGroup("g", 1);
  // The long key sorts first in the part: read along the range without
  // turns, its 1,000 items would all go before any other key's.
  std::string hot;
  for (int i = 0; i < 1000; ++i) {
    const std::string k = absl::StrCat("hot-", i);
    if (hot.empty() || KeyBlock(k) < KeyBlock(hot)) hot = k;
  }
  constexpr int kKeys = 5, kPerKey = 10, kHot = 1000;
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_LT(KeyBlock(hot), KeyBlock(absl::StrCat("key-", k)));
  }
  ProduceWithLongKey("g", hot, kHot, kKeys, kPerKey);
  ConsumerOptions o = Options("g", nullptr);
  o.handler = nullptr;
  o.claim_batch = 20;
  o.batch_handler = [&](const std::vector<Item>& items, AckTransaction& ack) {
    for (const Item& item : items) RecordAck(item, ack);
    return absl::OkStatus();
  };
  auto c = Start(o);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  EXPECT_TRUE(c->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM acks"), kHot + kKeys * kPerKey);
  EXPECT_EQ(KeysAckedOutOfOrder(), 0);
  // The other keys were done while most of the long one still waited.
  EXPECT_LT(Count(absl::StrCat(
                "SELECT count(*) FROM acks WHERE key = '", hot,
                "' AND acked_at < (SELECT max(acked_at) FROM acks WHERE "
                "key <> '",
                hot, "')")),
            kHot / 2);
}

TEST_F(KeyOrderTest, AKeyWithManyItemsGoesOnAtItsHandlersPace) {
  CreateGroup("g", 1);
  constexpr int kKeys = 200, kPerKey = 2, kHot = 400;
  ProduceWithLongKey("g", "hot", kHot, kKeys, kPerKey);
  // One worker, so the turns are the worker's alone: a claim offers each
  // key's head once per pass over the part's 201 keys, and the other keys
  // are done after two passes. One item of "hot" per pass would leave it
  // 2 or 3 items by then.
  ConsumerOptions o = Options("g", [&](const Item& item, AckTransaction& ack) {
    RecordAck(item, ack);
    return absl::OkStatus();
  });
  o.workers = 1;
  auto c = Start(o);
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  const ConsumerStats stats = c->stats();
  EXPECT_TRUE(c->Stop().ok());
  // The handler writes in the acknowledging transaction: each next item of
  // "hot" came with the ack of the one before (one statement), not after.
  EXPECT_GE(stats.carried_claims, 16);
  EXPECT_EQ(Count("SELECT count(*) FROM acks"), kHot + kKeys * kPerKey);
  EXPECT_EQ(KeysAckedOutOfOrder(), 0);
  EXPECT_GE(Count("SELECT count(*) FROM acks WHERE key = 'hot' AND acked_at < "
                  "(SELECT max(acked_at) FROM acks WHERE key <> 'hot')"),
            16);
}

TEST_F(KeyOrderTest, OrderHoldsAcrossARebalanceWithAnItemInFlight) {
  CreateGroup("g", 8);
  constexpr int kKeys = 16, kPerKey = 12;
  ProduceKeyed("g", kKeys, kPerKey, 3);
  std::atomic<int> handled{0};
  auto slow = [&](const Item& item, AckTransaction& ack) {
    ++handled;
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    RecordAck(item, ack);
    return absl::OkStatus();
  };
  auto a = Start(Options("g", slow));
  ASSERT_TRUE(WaitFor([&] { return handled.load() > 20; }, absl::Seconds(20)));
  // A second member takes half of the parts while items are with the
  // first one's handlers; then the first one leaves.
  auto b = Start(Options("g", slow));
  ASSERT_TRUE(WaitFor([&] { return handled.load() > 100; }, absl::Seconds(30)));
  EXPECT_TRUE(a->Stop().ok());
  ASSERT_TRUE(Drained(absl::Seconds(60)));
  EXPECT_TRUE(b->Stop().ok());
  EXPECT_EQ(Count("SELECT count(*) FROM acks"), kKeys * kPerKey);
  EXPECT_EQ(OutOfOrderKeys(kPerKey), 0);
}

TEST_F(KeyOrderTest, OrderingNoneDoesNotHoldAKeyBehindAFailure) {
  CreateGroup("g", 1);
  SetOrdering("g", "none");
  ProduceKeyed("g", 1, 4);
  std::atomic<bool> failed{false};
  ConsumerOptions o = Options("g", [&](const Item& item, AckTransaction& ack) {
    if (ParsePayload(item.payload).seq == 0 && !failed.exchange(true)) {
      return absl::InternalError("once");
    }
    RecordAck(item, ack);
    return absl::OkStatus();
  });
  o.backoff_initial = absl::Milliseconds(500);
  auto c = Start(o);
  ASSERT_TRUE(Drained(absl::Seconds(30)));
  EXPECT_TRUE(c->Stop().ok());
  // Items 1..3 went on while item 0 waited for its retry.
  EXPECT_EQ(Count("SELECT seq FROM acks ORDER BY acked_at DESC LIMIT 1"), 0);
}

}  // namespace
}  // namespace sqlgroup
