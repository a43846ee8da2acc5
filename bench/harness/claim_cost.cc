#include "claim_cost.h"

#include <map>
#include <pqxx/pqxx>
#include <stdexcept>
#include <vector>

#include "absl/time/clock.h"
#include "common.h"
#include "keyspace.h"
#include "sqlgroup/admin.h"
#include "store/item_store.h"
#include "store/member_store.h"

namespace sqlgroup::bench {
namespace {

template <typename T>
T Must(absl::StatusOr<T> v) {
  if (!v.ok()) throw std::runtime_error(v.status().ToString());
  return *std::move(v);
}

void Must(const absl::Status& s) {
  if (!s.ok()) throw std::runtime_error(s.ToString());
}

// claimcost for the producer's layout (the name it has always had),
// claimcost_<layout> for the others.
std::string ClaimCostGroup(const std::string& layout) {
  return layout == "producer" ? "claimcost" : "claimcost_" + layout;
}

}  // namespace

void RunClaimCost(const ClaimCostConfig& config) {
  const IdLayout layout = ParseIdLayout(config.layout);
  // One group per layout, alone in the table while it is measured.
  const std::string group = ClaimCostGroup(config.layout);
  auto admin = Must(Admin::Connect({.dsn = config.dsn}));
  // A long TTL: the harness does not heartbeat between claims.
  const absl::Status created = admin->CreateGroup(
      {.name = group, .parts = config.parts, .session_ttl = absl::Hours(1)});
  if (!created.ok() && !absl::IsAlreadyExists(created)) Must(created);

  auto conn = Connect(config.dsn, "bench-claim-cost");
  {
    pqxx::nontransaction tx(*conn);
    if (tx.exec_params("DELETE FROM sqlgroup.items WHERE group_name LIKE "
                       "'claimcost%' AND group_name <> $1",
                       group)
            .affected_rows() > 0) {
      tx.exec("VACUUM sqlgroup.items");
    }
  }
  const absl::Time load_start = absl::Now();
  const int64_t added =
      TopUp(*conn, kItemsTable, group, config.parts, config.backlog, layout);
  const double load_s = absl::ToDoubleSeconds(absl::Now() - load_start);

  // Start from a clean slate: the load's dirty pages written and its
  // checkpoint done, as in a queue that has been running a while.
  pqxx::nontransaction(*conn).exec("CHECKPOINT");
  // As on a worker's connection, generic plans included: without them
  // PostgreSQL planned each claim of a large table afresh (session 8: p50
  // 0.36-0.37 against 0.13-0.15 ms at 1M waiting items).
  store::PrepareItemStatements(*conn, /*pauses=*/true);
  const std::string session =
      Must(store::RegisterSession(*conn, group, {"bench", 0, "claim-cost"},
                                  /*notify=*/false))
          .session;
  std::vector<int> all(config.parts);
  for (int p = 0; p < config.parts; ++p) all[p] = p;
  std::map<int, int64_t> epochs;
  for (const store::Owner& o :
       Must(store::TakeParts(*conn, group, session, all, config.parts))) {
    epochs[o.part] = o.epoch;
  }
  if (static_cast<int>(epochs.size()) != config.parts) {
    throw std::runtime_error("parts of the claim-cost group are owned already");
  }
  std::vector<Uuid128> cursor(config.parts);
  for (int p = 0; p < config.parts; ++p) {
    cursor[p] = PartRange(p, config.parts).first;
  }
  std::vector<double> ms;
  int64_t claimed = 0;
  // Pages PostgreSQL had to read in (shared_buffers misses) and WAL
  // written, per measured claim: what changes with the backlog's size.
  auto io = [&] {
    pqxx::nontransaction tx(*conn);
    // A backend publishes its own block counts at most once a second:
    // ask it to at the end of this statement, then read them.
    tx.exec("SELECT pg_stat_force_next_flush()");
    const pqxx::row r = tx.exec1(
        "SELECT blks_read, pg_current_wal_lsn() - '0/0'::pg_lsn FROM "
        "pg_stat_database WHERE datname = current_database()");
    return std::make_pair(r[0].as<int64_t>(),
                          static_cast<int64_t>(r[1].as<double>()));
  };
  std::pair<int64_t, int64_t> io0;
  const int warmup = config.parts * 2;
  for (int i = 0; i < warmup + config.samples; ++i) {
    if (i == warmup) io0 = io();
    const int part = i % config.parts;
    const KeyRange range = PartRange(part, config.parts);
    const store::ClaimRef ref{group, session, part, epochs[part]};
    const absl::Time start = absl::Now();
    auto items = Must(store::ClaimItems(*conn, ref, cursor[part], range.last,
                                        config.claim_batch));
    const double took = absl::ToDoubleMilliseconds(absl::Now() - start);
    if (items.empty()) {
      cursor[part] = range.first;  // wrap, as the workers do
    } else {
      const Uuid128 last = *ParseUuid(items.back().id);
      cursor[part] = last >= range.last ? range.first : last + 1;
    }
    if (i >= warmup) {
      ms.push_back(took);
      claimed += static_cast<int64_t>(items.size());
    }
  }
  const std::pair<int64_t, int64_t> io1 = io();
  Must(store::LeaveSession(*conn, group, session, false, /*secret=*/""));
  const double mean_items =
      static_cast<double>(claimed) / static_cast<double>(ms.size());
  const double p50 = Quantile(ms, 0.5);
  const double p99 = Quantile(ms, 0.99);
  JsonLine()
      .Add("bench", "claim_cost")
      .Add("layout", config.layout)
      .Add("backlog", CountItems(*conn, kItemsTable, group))
      .Add("claim_batch", config.claim_batch)
      .Add("items_per_claim", mean_items)
      .Add("samples", static_cast<int64_t>(ms.size()))
      .Add("p50_ms", p50)
      .Add("p99_ms", p99)
      .Add("max_ms", ms.empty() ? 0.0 : ms.back())
      .Add("blocks_read_per_claim",
           static_cast<double>(io1.first - io0.first) / ms.size())
      .Add("wal_bytes_per_claim",
           static_cast<double>(io1.second - io0.second) / ms.size())
      .Add("loaded", added)
      .Add("load_s", load_s)
      .Print();
}

}  // namespace sqlgroup::bench
