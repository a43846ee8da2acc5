#include "keyed.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <pqxx/pqxx>
#include <stdexcept>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/producer.h"
#include "wait_sampler.h"

namespace sqlgroup::bench {
namespace {

constexpr char kHotKey[] = "hot";

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(absl::StrCat(what, ": ", s.ToString()));
}

std::string GroupName(const KeyedConfig& c) {
  return absl::StrCat("kb_", c.items, "_", c.ordering);
}

// The other keys of a backlog: keys (evenly), hot (all but the hot key).
int OtherKeys(const KeyedConfig& c) {
  if (c.items == "keys") return c.keys;
  if (c.items == "hot") return c.keys - 1;
  return 0;
}

// Creates the group with the ordering asked for, and checks the ordering
// of one made by an earlier run.
std::string EnsureGroup(const KeyedConfig& c) {
  auto ordering = ParseOrdering(c.ordering);
  Check(ordering.status(), "--ordering");
  auto admin = Admin::Connect({.dsn = c.dsn});
  Check(admin.status(), "connect");
  const std::string group = GroupName(c);
  GroupConfig config;
  config.name = group;
  config.parts = c.parts;
  config.ordering = *ordering;
  const absl::Status s = (*admin)->CreateGroup(config);
  if (!s.ok() && !absl::IsAlreadyExists(s)) Check(s, "create group");
  auto conn = Connect(c.dsn, "bench-keyed-setup");
  pqxx::nontransaction tx(*conn);
  const std::string stored =
      tx.exec_params1("SELECT ordering FROM sqlgroup.groups WHERE name = $1",
                      group)[0]
          .c_str();
  if (stored != c.ordering) {
    throw std::runtime_error(absl::StrCat("group ", group, " has ordering '",
                                          stored, "', not '", c.ordering, "'"));
  }
  return group;
}

// What waits in the group: items of the other keys (all items when there
// is no hot key), of the hot key, and the other keys that still have items.
struct Backlog {
  int64_t other = 0;
  int64_t hot = 0;
  int64_t other_keys = 0;
};

Backlog ReadBacklog(pqxx::connection& conn, const std::string& group,
                    bool count_keys) {
  pqxx::nontransaction tx(conn);
  const pqxx::row r = tx.exec_params1(
      absl::StrCat(
          "SELECT count(*) FILTER (WHERE key IS DISTINCT FROM $2), "
          "count(*) FILTER (WHERE key = $2), ",
          count_keys ? "count(DISTINCT key) FILTER (WHERE key <> $2) " : "0 ",
          "FROM sqlgroup.items WHERE group_name = $1"),
      group, kHotKey);
  return {r[0].as<int64_t>(), r[1].as<int64_t>(), r[2].as<int64_t>()};
}

struct Loaded {
  int64_t items = 0;
  double seconds = 0;
};

// Enqueues through the Producer what the backlog lacks: the hot key's items
// spread evenly among the others' (as `hot_share` of a stream would be),
// the others' keys round robin from a random one.
Loaded TopUp(const KeyedConfig& c, const std::string& group,
             const Backlog& have) {
  const bool hot = c.items == "hot";
  const int64_t hot_target =
      hot ? static_cast<int64_t>(static_cast<double>(c.backlog) * c.hot_share /
                                 (1 - c.hot_share))
          : 0;
  const int64_t need_other = std::max<int64_t>(0, c.backlog - have.other);
  const int64_t need_hot = std::max<int64_t>(0, hot_target - have.hot);
  const int64_t total = need_other + need_hot;
  if (total == 0) return {};
  auto producer = Producer::Create({.dsn = c.dsn, .group = group});
  Check(producer.status(), "producer");
  const int others = OtherKeys(c);
  absl::BitGen gen;
  int next_key = others > 0 ? absl::Uniform(gen, 0, others) : 0;
  const std::string payload(16, '\x5a');
  const absl::Time start = absl::Now();
  int64_t hot_done = 0;
  std::vector<NewItem> items;
  for (int64_t i = 0; i < total; ++i) {
    NewItem item;
    item.payload = payload;
    // Item i is the hot key's when it brings the hot count to its share of
    // the first i + 1 items.
    if (need_hot > 0 && (i + 1) * need_hot / total > hot_done) {
      item.key = kHotKey;
      ++hot_done;
    } else if (others > 0) {
      item.key = absl::StrCat("k", next_key);
      next_key = (next_key + 1) % others;
    }
    items.push_back(std::move(item));
    if (static_cast<int64_t>(items.size()) == c.enqueue_batch ||
        i + 1 == total) {
      Check((*producer)->Enqueue(items).status(), "enqueue");
      items.clear();
    }
  }
  return {total, absl::ToDoubleSeconds(absl::Now() - start)};
}

// Counts, per class, the items the handler saw, and the handler's calls.
struct Seen {
  std::atomic<int64_t> hot{0};
  std::atomic<int64_t> other{0};
  std::atomic<int64_t> calls{0};
  void Count(const Item& item) {
    (item.key && *item.key == kHotKey ? hot : other)
        .fetch_add(1, std::memory_order_relaxed);
  }
};

std::unique_ptr<Consumer> StartConsumer(const KeyedConfig& c,
                                        const std::string& group, Seen* seen) {
  ConsumerOptions options;
  options.dsn = c.dsn;
  options.group = group;
  options.instance = "bench";
  options.workers = c.consumers;
  options.max_connections = 1 + c.consumers;  // one per worker
  if (c.handler == "batch") {
    options.claim_batch = c.batch;
    options.batch_handler = [seen](const std::vector<Item>& items,
                                   AckTransaction&) {
      for (const Item& item : items) seen->Count(item);
      seen->calls.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    };
  } else {
    options.claim_batch = c.claim_batch;
    options.handler = [seen](const Item& item, AckTransaction&) {
      seen->Count(item);
      seen->calls.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    };
  }
  auto consumer = Consumer::Create(std::move(options));
  Check(consumer.status(), "consumer");
  Check((*consumer)->Start(), "start");
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (static_cast<int>((*consumer)->owned_parts().size()) < c.parts) {
    if (absl::Now() > deadline) {
      throw std::runtime_error("the consumer never owned every part");
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return std::move(*consumer);
}

}  // namespace

bool RunKeyed(const KeyedConfig& c) {
  if (c.items != "unkeyed" && c.items != "keys" && c.items != "hot") {
    throw std::invalid_argument("--items must be unkeyed, keys or hot");
  }
  if (c.handler != "item" && c.handler != "batch") {
    throw std::invalid_argument("--handler must be item or batch");
  }
  if (c.items == "hot" &&
      (c.hot_share <= 0 || c.hot_share >= 1 || c.keys < 2)) {
    throw std::invalid_argument("hot needs 0 < --hot_share < 1, --keys >= 2");
  }
  const std::string group = EnsureGroup(c);
  const bool keyed = c.items != "unkeyed";
  auto conn = Connect(c.dsn, "bench-keyed-setup");
  const Loaded loaded = TopUp(c, group, ReadBacklog(*conn, group, false));
  const Backlog before = ReadBacklog(*conn, group, false);
  const absl::Time vacuum_start = absl::Now();
  {
    // Every run starts from a vacuumed table (the last run's deletes gone)
    // and a checkpoint made, not one due in the window.
    pqxx::nontransaction tx(*conn);
    tx.exec("VACUUM ANALYZE sqlgroup.items");
    tx.exec("CHECKPOINT");
  }
  const double vacuum_s = absl::ToDoubleSeconds(absl::Now() - vacuum_start);

  Seen seen;
  std::unique_ptr<Consumer> consumer = StartConsumer(c, group, &seen);
  absl::SleepFor(absl::Seconds(c.warmup_s));
  WaitSampler sampler(c.dsn, "sqlgroup-%", absl::Milliseconds(20));
  const int64_t a0 = consumer->stats().acked;
  const int64_t h0 = seen.hot, o0 = seen.other, n0 = seen.calls;
  const absl::Time t0 = absl::Now();
  sampler.Start();
  absl::SleepFor(absl::Seconds(c.seconds));
  const int64_t a1 = consumer->stats().acked;
  const int64_t h1 = seen.hot, o1 = seen.other, n1 = seen.calls;
  const absl::Time t1 = absl::Now();
  const WaitSummary waits = sampler.Stop();
  const ConsumerStats stats = consumer->stats();
  Check(consumer->Stop(), "stop");
  consumer.reset();

  const Backlog left = ReadBacklog(*conn, group, keyed && c.ordering == "key");
  // Starved: fewer waiting items than the last claims could hold, a hot
  // key that ran out, or, for a handler of single items under ordering
  // 'key' (one item of a key at a time, so the keys bound the
  // parallelism), more than 5% of the keys with nothing left (keys share
  // parts unevenly, so a few keys of the emptiest parts run out first
  // without changing the rate). A batch handler, and any handler under
  // 'none', takes a part's keys' runs one after another, so keys running
  // out there is the normal course.
  const int64_t claim = std::max(c.batch, c.claim_batch);
  const bool drained = left.other < static_cast<int64_t>(c.consumers) * claim ||
                       (c.items == "hot" && left.hot == 0) ||
                       (c.ordering == "key" && c.handler == "item" &&
                        left.other_keys < OtherKeys(c) * 95 / 100);
  const double secs = absl::ToDoubleSeconds(t1 - t0);
  JsonLine()
      .Add("bench", "keyed")
      .Add("items_kind", c.items)
      .Add("ordering", c.ordering)
      .Add("handler", c.handler)
      .Add("keys", keyed ? c.keys : 0)
      .Add("hot_share", c.items == "hot" ? c.hot_share : 0.0)
      .Add("consumers", c.consumers)
      .Add("parts", c.parts)
      .Add("batch", c.handler == "batch" ? c.batch : 1)
      .Add("items_per_s", static_cast<double>(a1 - a0) / secs)
      .Add("hot_per_s", static_cast<double>(h1 - h0) / secs)
      .Add("other_per_s", static_cast<double>(o1 - o0) / secs)
      .Add("items", a1 - a0)
      .Add("items_per_call", static_cast<double>(h1 - h0 + o1 - o0) /
                                 std::max<int64_t>(1, n1 - n0))
      .Add("seconds", secs)
      .Add("backlog_other", before.other)
      .Add("backlog_hot", before.hot)
      .Add("enqueued", loaded.items)
      .Add("enqueue_per_s",
           loaded.seconds > 0
               ? static_cast<double>(loaded.items) / loaded.seconds
               : 0.0)
      .Add("enqueue_s", loaded.seconds)
      .Add("vacuum_s", vacuum_s)
      .Add("consumed_other", before.other - left.other)
      .Add("left_other", left.other)
      .Add("left_hot", left.hot)
      .Add("left_keys", left.other_keys)
      .Add("drained", drained)
      .Add("errors", stats.failed + stats.lost_claims)
      .Raw("waits", waits.Json())
      .Print();
  return !drained;
}

}  // namespace sqlgroup::bench
