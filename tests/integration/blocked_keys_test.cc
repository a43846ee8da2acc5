// Keys blocked behind a retry, under per-key order: a key whose head
// failed and waits for its retry holds back the key's later items. The
// count per part (store::MeasureBlocked for the metrics, store::
// CountBlocked for `group describe`) against rows laid out by hand, its
// cap and its plan; then a consumer whose handler fails some keys' heads
// with a long backoff, whose gauges and describe show exactly those keys
// until they are acknowledged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <map>
#include <pqxx/pqxx>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "key_placement.h"
#include "keyspace.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/producer.h"
#include "store/item_store.h"
#include "support/consumer_fixture.h"
#include "support/wait.h"

namespace sqlgroup {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::WaitFor;

// part -> blocked keys, for every part of `parts`.
using PerPart = std::map<int, int64_t>;

int PartOfKey(const std::string& key, int parts) {
  return PartOf(BlockStart(KeyBlock(key)), parts);
}

PerPart Zeros(int parts) {
  PerPart out;
  for (int p = 0; p < parts; ++p) out[p] = 0;
  return out;
}

class BlockedKeysTest : public testing::ConsumerFixture {
 protected:
  // An item of `key` (empty: unkeyed, at a random id) in `group`, the
  // `seq`th of its key (later seq, later id), enqueued `age` ago, after
  // `attempts` failures, due at `not_before` (an SQL expression).
  void Insert(const std::string& group, const std::string& key, int seq,
              int attempts, const std::string& not_before,
              absl::Duration age = absl::Seconds(1)) {
    const uint64_t micros = 1700000000000000 + seq;
    pqxx::work tx(*conn_);
    tx.exec_params(
        absl::StrCat("INSERT INTO sqlgroup.items (group_name, id, key, "
                     "attempts, not_before, enqueued_at) VALUES ($1, "
                     "coalesce(nullif($2, '')::uuid, gen_random_uuid()), "
                     "nullif($3, ''), "
                     "$4, ",
                     not_before,
                     ", clock_timestamp() - $5::bigint * interval '1 "
                     "microsecond')"),
        group,
        key.empty() ? std::string("")
                    : FormatUuid(KeyedItemId(KeyBlock(key), micros, 7)),
        key, attempts, absl::ToInt64Microseconds(age));
    tx.commit();
  }

  static std::vector<KeyRange> Ranges(int parts) {
    std::vector<KeyRange> ranges;
    for (int p = 0; p < parts; ++p) ranges.push_back(PartRange(p, parts));
    return ranges;
  }
  static std::vector<int> Numbers(int parts) {
    std::vector<int> numbers;
    for (int p = 0; p < parts; ++p) numbers.push_back(p);
    return numbers;
  }

  // The measurement the members run, by part.
  std::map<int, store::PartBlockedRow> Measure(pqxx::connection& conn,
                                               const std::string& group,
                                               int parts, int cap) {
    auto rows =
        store::MeasureBlocked(conn, group, Numbers(parts), Ranges(parts), cap);
    EXPECT_TRUE(rows.ok()) << rows.status();
    std::map<int, store::PartBlockedRow> out;
    if (!rows.ok()) return out;
    for (const store::PartBlockedRow& row : *rows) out[row.part] = row;
    EXPECT_EQ(out.size(), static_cast<size_t>(parts));
    return out;
  }

  static PerPart Keys(const std::map<int, store::PartBlockedRow>& rows) {
    PerPart out;
    for (const auto& [part, row] : rows) out[part] = row.keys;
    return out;
  }
};

// One key of each kind, in four parts: only the keys whose head failed
// and is not due yet count, once each, in their own part.
TEST_F(BlockedKeysTest, CountsKeysWhoseHeadWaitsForARetryAndNothingElse) {
  constexpr int kParts = 4;
  CreateGroup("g", kParts);
  CreateGroup("other", kParts);
  const std::string later = "clock_timestamp() + interval '1 hour'";
  const std::string past = "clock_timestamp() - interval '1 second'";
  // Blocked: a failed head two minutes old, with an item behind it.
  Insert("g", "old-head", 0, 2, later, absl::Seconds(120));
  Insert("g", "old-head", 1, 0, "'-infinity'");
  // Blocked, counted once: a batch's run that failed together.
  Insert("g", "failed-run", 0, 1, later);
  Insert("g", "failed-run", 1, 1, later);
  // Not blocked: its retry is due (about to be handed out again).
  Insert("g", "due-again", 0, 1, past);
  Insert("g", "due-again", 1, 0, "'-infinity'");
  // Not blocked by a retry: a delayed head that never failed.
  Insert("g", "delayed", 0, 0, later);
  // Not blocked by a retry: a failed item behind a head that is due.
  Insert("g", "behind", 0, 0, "'-infinity'");
  Insert("g", "behind", 1, 1, later);
  // No key, nothing behind it.
  Insert("g", "", 0, 1, later);
  // Another group's blocked key.
  Insert("other", "elsewhere", 0, 1, later);

  PerPart expected = Zeros(kParts);
  ++expected[PartOfKey("old-head", kParts)];
  ++expected[PartOfKey("failed-run", kParts)];

  pqxx::connection worker(member_dsn_);
  store::PrepareItemStatements(worker, /*pauses=*/true);
  const auto rows = Measure(worker, "g", kParts, 100);
  EXPECT_EQ(Keys(rows), expected);
  const int old_part = PartOfKey("old-head", kParts);
  EXPECT_GE(rows.at(old_part).oldest, absl::Seconds(119));
  EXPECT_LT(rows.at(old_part).oldest, absl::Seconds(200));
  for (const auto& [part, row] : rows) {
    if (row.keys == 0) {
      EXPECT_EQ(row.oldest, absl::ZeroDuration()) << part;
    }
  }

  // describe counts the same, exactly.
  auto d = admin_->DescribeGroup("g", /*count_lag=*/false);
  ASSERT_TRUE(d.ok()) << d.status();
  PerPart described;
  for (const PartInfo& p : d->parts) described[p.part] = p.blocked_keys;
  EXPECT_EQ(described, expected);
  EXPECT_GE(d->parts[old_part].oldest_blocked_age, absl::Seconds(119));

  // The old head's retry falls due: its key is no longer blocked.
  {
    pqxx::work tx(*conn_);
    tx.exec(
        "UPDATE sqlgroup.items SET not_before = clock_timestamp() WHERE key = "
        "'old-head' AND attempts > 0");
    tx.commit();
  }
  --expected[old_part];
  EXPECT_EQ(Keys(Measure(worker, "g", kParts, 100)), expected);
}

TEST_F(BlockedKeysTest, UnderOrderingNoneDescribeShowsNoBlockedKeys) {
  CreateGroup("loose", 2);
  Insert("loose", "k", 0, 1, "clock_timestamp() + interval '1 hour'");
  {
    pqxx::work tx(*conn_);
    tx.exec(
        "UPDATE sqlgroup.groups SET ordering = 'none' WHERE name = 'loose'");
    tx.commit();
  }
  auto d = admin_->DescribeGroup("loose");
  ASSERT_TRUE(d.ok()) << d.status();
  for (const PartInfo& p : d->parts) EXPECT_EQ(p.blocked_keys, 0) << p.part;
}

// The cap bounds the index entries read per part: beyond it, a lower bound.
TEST_F(BlockedKeysTest, ReadsAtMostCapFailedItemsPerPart) {
  CreateGroup("one", 1);
  for (int k = 0; k < 5; ++k) {
    Insert("one", absl::StrCat("key-", k), 0, 1,
           "clock_timestamp() + interval '1 hour'");
  }
  pqxx::connection worker(member_dsn_);
  store::PrepareItemStatements(worker, /*pauses=*/true);
  EXPECT_EQ(Measure(worker, "one", 1, 3).at(0).keys, 3);
  EXPECT_EQ(Measure(worker, "one", 1, 100).at(0).keys, 5);
  auto d = admin_->DescribeGroup("one", /*count_lag=*/false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->parts[0].blocked_keys, 5);
}

// The members' generic plan reads the failed items through their partial
// index, not the part's whole range or the table.
TEST_F(BlockedKeysTest, TheMeasurementReadsTheIndexOfFailedItems) {
  CreateGroup("g", 4);
  {
    pqxx::work tx(*conn_);
    tx.exec(
        "INSERT INTO sqlgroup.items (group_name, id, key) SELECT 'g', "
        "gen_random_uuid(), 'k' || i FROM generate_series(1, 20000) i");
    tx.commit();
  }
  for (int k = 0; k < 10; ++k) {
    Insert("g", absl::StrCat("failing-", k), 0, 1,
           "clock_timestamp() + interval '1 hour'");
  }
  pqxx::nontransaction(*conn_).exec("ANALYZE sqlgroup.items");
  pqxx::connection worker(member_dsn_);
  store::PrepareItemStatements(worker, /*pauses=*/true);
  int64_t total = 0;
  for (const auto& [part, row] : Measure(worker, "g", 4, 100)) {
    total += row.keys;
  }
  EXPECT_EQ(total, 10);
  const KeyRange r = PartRange(0, 4);
  std::string plan;
  pqxx::nontransaction tx(worker);
  for (const pqxx::row& row : tx.exec(absl::StrCat(
           "EXPLAIN EXECUTE sqlgroup_blocked('g', '{0}', '{",
           FormatUuid(r.first), "}', '{", FormatUuid(r.last), "}', 100)"))) {
    plan += row[0].as<std::string>() + "\n";
  }
  EXPECT_THAT(plan, HasSubstr("items_retrying")) << plan;
  EXPECT_THAT(plan, Not(HasSubstr("Seq Scan on items"))) << plan;
}

// Payloads are "KEY:SEQ".
std::pair<std::string, int> KeyAndSeq(const std::string& payload) {
  const std::pair<std::string, std::string> f =
      absl::StrSplit(payload, absl::MaxSplits(':', 1));
  int seq = -1;
  EXPECT_TRUE(absl::SimpleAtoi(f.second, &seq)) << payload;
  return {f.first, seq};
}

// The gauge `name` of every part of `group` in `registry`.
std::map<int, double> Gauges(prometheus::Registry& registry,
                             const std::string& name,
                             const std::string& group) {
  std::map<int, double> out;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      std::string part, in_group;
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == "part") part = l.value;
        if (l.name == "group") in_group = l.value;
      }
      int p = -1;
      if (in_group == group && absl::SimpleAtoi(part, &p)) {
        out[p] = m.gauge.value;
      }
    }
  }
  return out;
}

std::map<int, double> AsGauges(const PerPart& counts) {
  std::map<int, double> out;
  for (const auto& [part, n] : counts) out[part] = static_cast<double>(n);
  return out;
}

// A handler fails the first attempt of the heads of some keys, with an
// hour's backoff: the member's gauges and describe show exactly those keys,
// part by part, while every other key is drained; once their retries fall
// due and succeed, every part shows 0.
TEST_F(BlockedKeysTest, AConsumerShowsTheKeysWhoseHeadsFailedUntilAcked) {
  constexpr int kParts = 4, kKeys = 24, kPerKey = 3;
  CreateGroup("keys", kParts);
  // Every third key, and key 1: an uneven spread over the parts.
  std::set<std::string> failing = {"key-1"};
  for (int k = 0; k < kKeys; k += 3) failing.insert(absl::StrCat("key-", k));
  PerPart expected = Zeros(kParts);
  for (const std::string& key : failing) ++expected[PartOfKey(key, kParts)];
  {
    auto p = Producer::Create({.dsn = db_.dsn(), .group = "keys"});
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<NewItem> items;
    for (int seq = 0; seq < kPerKey; ++seq) {
      for (int k = 0; k < kKeys; ++k) {
        const std::string key = absl::StrCat("key-", k);
        items.push_back({.key = key, .payload = absl::StrCat(key, ":", seq)});
      }
    }
    ASSERT_TRUE((*p)->Enqueue(items).ok());
  }
  pqxx::work grant(*conn_);
  grant.exec(
      "CREATE TABLE acks (key text, seq int, acked_at timestamptz DEFAULT "
      "clock_timestamp())");
  grant.exec(absl::StrCat("GRANT INSERT ON acks TO ", testing::kMemberRole));
  grant.commit();

  prometheus::Registry registry;
  ConsumerOptions o =
      Options("keys", [&](const Item& item, AckTransaction& ack) {
        const auto [key, seq] = KeyAndSeq(item.payload);
        if (failing.count(key) && seq == 0 && item.attempt == 1) {
          return absl::InternalError("the head fails once");
        }
        ack.work().exec_params("INSERT INTO acks (key, seq) VALUES ($1, $2)",
                               key, seq);
        return absl::OkStatus();
      });
  o.metrics = &registry;
  o.lag_interval = absl::Milliseconds(100);
  o.backoff_initial = o.backoff_max = absl::Hours(1);
  o.idle_poll_listening = absl::Milliseconds(500);
  auto c = Start(o);
  ASSERT_NE(c, nullptr);

  const int64_t others =
      (kKeys - static_cast<int64_t>(failing.size())) * kPerKey;
  ASSERT_TRUE(WaitFor(
      [&] {
        return Count("SELECT count(*) FROM acks") == others &&
               Gauges(registry, "sqlgroup_part_blocked_keys", "keys") ==
                   AsGauges(expected);
      },
      absl::Seconds(30)))
      << "acks " << Count("SELECT count(*) FROM acks") << " of " << others;
  // Every other key went on; the failing keys' later items waited.
  EXPECT_EQ(Count("SELECT count(*) FROM sqlgroup.items"),
            static_cast<int64_t>(failing.size()) * kPerKey);
  // Each part with a blocked key shows its oldest head's age, the others 0.
  const std::map<int, double> ages =
      Gauges(registry, "sqlgroup_part_oldest_blocked_seconds", "keys");
  ASSERT_EQ(ages.size(), static_cast<size_t>(kParts));
  for (const auto& [part, keys] : expected) {
    if (keys > 0) {
      EXPECT_GT(ages.at(part), 0) << part;
      EXPECT_LT(ages.at(part), 60) << part;
    } else {
      EXPECT_EQ(ages.at(part), 0) << part;
    }
  }
  auto d = admin_->DescribeGroup("keys");
  ASSERT_TRUE(d.ok()) << d.status();
  PerPart described;
  for (const PartInfo& p : d->parts) described[p.part] = p.blocked_keys;
  EXPECT_EQ(described, expected);

  // Their retries fall due (as an hour passing would make them), announced
  // as a producer announces items: the heads succeed, their keys go on.
  {
    pqxx::work tx(*conn_);
    tx.exec(
        "UPDATE sqlgroup.items SET not_before = clock_timestamp() WHERE "
        "attempts > 0");
    tx.exec("SELECT pg_notify('sqlgroup', 'items:keys')");
    tx.commit();
  }
  ASSERT_TRUE(Drained(absl::Seconds(30)));
  ASSERT_TRUE(WaitFor(
      [&] {
        return Gauges(registry, "sqlgroup_part_blocked_keys", "keys") ==
                   AsGauges(Zeros(kParts)) &&
               Gauges(registry, "sqlgroup_part_oldest_blocked_seconds",
                      "keys") == AsGauges(Zeros(kParts));
      },
      absl::Seconds(10)));
  d = admin_->DescribeGroup("keys");
  ASSERT_TRUE(d.ok()) << d.status();
  for (const PartInfo& p : d->parts) EXPECT_EQ(p.blocked_keys, 0) << p.part;
  EXPECT_EQ(Count("SELECT count(*) FROM acks"), kKeys * kPerKey);
  // Each failing key's items in order, the head first.
  EXPECT_EQ(Count("SELECT count(*) FROM (SELECT key, array_agg(seq ORDER BY "
                  "acked_at) AS s FROM acks GROUP BY key) a WHERE s <> "
                  "'{0,1,2}'"),
            0);
  EXPECT_TRUE(c->Stop().ok());
}

}  // namespace
}  // namespace sqlgroup
