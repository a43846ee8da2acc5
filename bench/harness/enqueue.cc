#include "enqueue.h"

#include <pqxx/pqxx>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common.h"
#include "sqlgroup/producer.h"

namespace sqlgroup::bench {

void RunEnqueue(const EnqueueConfig& c) {
  auto conn = Connect(c.dsn, "sqlgroup-bench-enqueue");
  {
    pqxx::work tx(*conn);
    tx.exec_params(
        "INSERT INTO sqlgroup.groups (name, parts) VALUES ($1, 16) "
        "ON CONFLICT DO NOTHING",
        c.group);
    tx.commit();
  }
  const bool keyed = c.mode == "keyed";
  if (!keyed && c.mode != "plain") {
    throw std::invalid_argument("--mode is plain or keyed");
  }
  std::vector<NewItem> items(c.batch);
  for (int i = 0; i < c.batch; ++i) {
    items[i].key = absl::StrCat("k", i % 100);
    items[i].payload = "0123456789abcdef";
  }
  const std::string run =
      absl::StrCat("bench:", absl::ToUnixNanos(absl::Now()));
  int64_t batches = 0;
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(c.seconds);
  while (absl::Now() < end) {
    EnqueueOptions options;
    if (keyed) {
      options.idempotency_key = absl::StrCat(run, ":", batches);
      if (batches > 0) {
        options.forget_key = absl::StrCat(run, ":", batches - 1);
      }
    }
    pqxx::work tx(*conn);
    auto ids = Producer::EnqueueIn(tx, c.group, items, options);
    if (!ids.ok()) {
      throw std::runtime_error(std::string(ids.status().message()));
    }
    tx.commit();
    ++batches;
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  JsonLine()
      .Add("bench", "enqueue")
      .Add("mode", c.mode)
      .Add("batch", c.batch)
      .Add("batches", batches)
      .Add("items_per_s", batches * c.batch / secs)
      .Print();
}

}  // namespace sqlgroup::bench
