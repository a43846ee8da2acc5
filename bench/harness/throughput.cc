#include "throughput.h"

#include <atomic>
#include <functional>
#include <pqxx/pqxx>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common.h"
#include "cpu_meter.h"
#include "keyspace.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/consumer.h"
#include "store/item_store.h"
#include "wait_sampler.h"

namespace sqlgroup::bench {
namespace {

constexpr char kGroup[] = "tp";

// Counters shared by a system's workers and the measuring thread.
struct Progress {
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> errors{0};
  std::atomic<int> ready{0};
  std::atomic<bool> stop{false};
};

// A system under test: Start() returns once every worker is connected and
// working; Done() counts items acknowledged so far.
class System {
 public:
  virtual ~System() = default;
  virtual void Start() = 0;
  virtual int64_t Done() const = 0;
  // Statements that failed: a broken system must not read as a slow one.
  virtual int64_t Errors() const = 0;
  virtual void Stop() = 0;
  virtual std::string AppPattern() const = 0;
  virtual std::string Table() const = 0;
};

// A system of `consumers` threads, one connection each, running Work(i);
// `batched`: `batch` items per statement, else one.
class ThreadSystem : public System {
 public:
  ThreadSystem(const ThroughputConfig& c, bool batched)
      : config_(c), per_statement_(batched ? c.batch : 1) {}
  ~ThreadSystem() override { Stop(); }
  void Start() override {
    Launch([this](int i) { Work(i); });
  }
  int64_t Done() const override { return progress_.done; }
  int64_t Errors() const override { return progress_.errors; }
  void Stop() override {
    progress_.stop = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 protected:
  void Launch(std::function<void(int)> body) {
    for (int i = 0; i < config_.consumers; ++i) {
      threads_.emplace_back([this, body, i] {
        try {
          body(i);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "worker %d: %s\n", i, e.what());
          ++progress_.errors;
          ++progress_.ready;
        }
      });
    }
    while (progress_.ready < config_.consumers) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  // One thread's loop: ready once connected, then working until stop.
  virtual void Work(int i) = 0;

  const ThroughputConfig config_;
  const int per_statement_;
  Progress progress_;
  std::vector<std::thread> threads_;
};

// The seed's SKIP LOCKED queue, on a table of sqlgroup.items' shape.
class SkipLocked : public ThreadSystem {
 public:
  SkipLocked(const ThroughputConfig& c, bool batched)
      : ThreadSystem(c, batched) {}
  std::string AppPattern() const override { return "bench-skiplocked-%"; }
  std::string Table() const override { return kSkipTable; }

 private:
  void Work(int i) override {
    auto conn = Connect(config_.dsn, absl::StrCat("bench-skiplocked-", i));
    // The seed's filter (failure_count < 3) is attempts here; the order is
    // the primary key's, which the planner walks with SKIP LOCKED.
    // The limit is a literal: as a parameter, the generic plan guesses a
    // tenth of the table and sorts it, which no one would ship.
    const int limit = per_statement_;
    conn->prepare("pick",
                  absl::StrCat("SELECT id FROM ", kSkipTable,
                               " WHERE group_name = $1 AND attempts < 5 "
                               "ORDER BY id LIMIT ",
                               limit, " FOR UPDATE SKIP LOCKED"));
    conn->prepare("done_one", absl::StrCat("DELETE FROM ", kSkipTable,
                                           " WHERE group_name = $1 AND "
                                           "id = $2::uuid"));
    conn->prepare("done_many", absl::StrCat("DELETE FROM ", kSkipTable,
                                            " WHERE group_name = $1 AND "
                                            "id = ANY($2::uuid[])"));
    ++progress_.ready;
    while (!progress_.stop) {
      try {
        pqxx::work tx(*conn);
        const pqxx::result r = tx.exec_prepared("pick", kGroup);
        if (r.empty()) {
          tx.commit();
          absl::SleepFor(absl::Milliseconds(1));
          continue;
        }
        // The handler would run here, inside the transaction (noop).
        if (r.size() == 1) {
          tx.exec_prepared("done_one", kGroup, r[0][0].c_str());
        } else {
          std::vector<std::string> ids;
          for (const pqxx::row& row : r) ids.push_back(row[0].c_str());
          tx.exec_prepared("done_many", kGroup,
                           absl::StrCat("{", absl::StrJoin(ids, ","), "}"));
        }
        tx.commit();
        progress_.done += static_cast<int64_t>(r.size());
      } catch (const pqxx::broken_connection&) {
        throw;
      } catch (const std::exception& e) {
        ++progress_.errors;
      }
    }
  }
};

// PostgreSQL's limit: deleting known rows by primary key, nothing else.
class DeleteLimit : public ThreadSystem {
 public:
  DeleteLimit(const ThroughputConfig& c, bool batched)
      : ThreadSystem(c, batched) {}
  std::string AppPattern() const override { return "bench-limit-%"; }
  std::string Table() const override { return kLimitTable; }
  void Start() override {
    // Every id up front (not timed), dealt out as sqlgroup's workers meet
    // them: each part to one connection (part p to connection p mod n),
    // in key order. The ids are the producer's (TopUp), so a part's rows
    // are heap neighbours for the limit as for the queues. (Dealt in plain
    // key order instead, all connections would delete neighbouring rows of
    // part 0 together and wait on each other's pages.)
    auto conn = Connect(config_.dsn, "bench-limit-setup");
    ids_.assign(config_.consumers, {});
    {
      pqxx::nontransaction tx(*conn);
      for (const pqxx::row& row :
           tx.exec_params(absl::StrCat("SELECT id::text FROM ", kLimitTable,
                                       " WHERE group_name = $1 ORDER BY id"),
                          kGroup)) {
        const int part = PartOf(*ParseUuid(row[0].c_str()), config_.parts);
        ids_[part % config_.consumers].push_back(row[0].c_str());
      }
    }
    ThreadSystem::Start();
  }

 private:
  void Work(int i) override {
    auto conn = Connect(config_.dsn, absl::StrCat("bench-limit-", i));
    conn->prepare("del_one", absl::StrCat("DELETE FROM ", kLimitTable,
                                          " WHERE group_name = $1 AND "
                                          "id = $2::uuid"));
    conn->prepare("del_many", absl::StrCat("DELETE FROM ", kLimitTable,
                                           " WHERE group_name = $1 AND "
                                           "id = ANY($2::uuid[])"));
    ++progress_.ready;
    const std::vector<std::string>& mine = ids_[i];
    const size_t step = per_statement_;
    size_t next = 0;
    while (!progress_.stop) {
      if (next >= mine.size()) return;
      const size_t end = std::min(mine.size(), next + step);
      // One autocommit statement: one transaction, one round trip.
      pqxx::nontransaction tx(*conn);
      pqxx::result r;
      if (step == 1) {
        r = tx.exec_prepared("del_one", kGroup, mine[next]);
      } else {
        r = tx.exec_prepared(
            "del_many", kGroup,
            absl::StrCat(
                "{",
                absl::StrJoin(mine.begin() + next, mine.begin() + end, ","),
                "}"));
      }
      progress_.done += r.affected_rows();
      next = end;
    }
  }

  std::vector<std::vector<std::string>> ids_;
};

// A queue's floor: what any queue that hands out the rows it deletes must
// do at least. Parts are dealt to connections as for DeleteLimit; each
// connection deletes its parts' rows in key order, `batch` at a time (or
// one), in one autocommit statement that returns them, and reads each
// row's id and payload as a handler would get them. No fence, no per-key
// order, no retries, and the delete commits before the "handler" runs: a
// floor for sqlgroup's costs, not a design anyone should ship.
class ReadDeleteLimit : public ThreadSystem {
 public:
  ReadDeleteLimit(const ThroughputConfig& c, bool batched)
      : ThreadSystem(c, batched) {}
  std::string AppPattern() const override { return "bench-readlimit-%"; }
  std::string Table() const override { return kLimitTable; }

 private:
  void Work(int i) override {
    auto conn = Connect(config_.dsn, absl::StrCat("bench-readlimit-", i));
    // The settings of sqlgroup's worker connections (generic plans, no
    // JIT, no sequential or bitmap scans: a plan of this delete made from
    // a churning table's statistics would scan it).
    store::PrepareItemStatements(*conn, /*pauses=*/true);
    const int limit = per_statement_;
    conn->prepare("take",
                  absl::StrCat("DELETE FROM ", kLimitTable,
                               " WHERE group_name = $1 AND id IN (SELECT id "
                               "FROM ",
                               kLimitTable,
                               " WHERE group_name = $1 AND id BETWEEN "
                               "$2::uuid AND $3::uuid ORDER BY id LIMIT ",
                               limit, ") RETURNING id::text, payload"));
    struct Part {
      Uuid128 cursor;
      Uuid128 last;
    };
    std::vector<Part> mine;
    for (int p = i; p < config_.parts; p += config_.consumers) {
      const KeyRange r = PartRange(p, config_.parts);
      mine.push_back({r.first, r.last});
    }
    ++progress_.ready;
    std::vector<std::pair<std::string, std::string>> handed;
    size_t next = 0;
    while (!progress_.stop && !mine.empty()) {
      Part& part = mine[next % mine.size()];
      pqxx::nontransaction tx(*conn);
      const pqxx::result r = tx.exec_prepared(
          "take", kGroup, FormatUuid(part.cursor), FormatUuid(part.last));
      handed.clear();
      Uuid128 top = part.cursor;
      // Through iterators, as sqlgroup's claims read rows (r[i][j] costs a
      // copy of the result per field).
      for (auto row = r.begin(); row != r.end(); ++row) {
        pqxx::row::const_iterator f = row->begin();
        std::string id(f->c_str(), f->size());
        ++f;
        handed.emplace_back(std::move(id), pqxx::binarystring(*f).str());
        top = std::max(top, *ParseUuid(handed.back().first));
      }
      progress_.done += static_cast<int64_t>(r.size());
      if (static_cast<int>(r.size()) < limit || top == part.last) {
        mine.erase(mine.begin() + static_cast<long>(next % mine.size()));
      } else {
        part.cursor = top + 1;
        ++next;
      }
    }
  }
};

class SqlGroup : public System {
 public:
  SqlGroup(const ThroughputConfig& c, bool batched)
      : config_(c), batched_(batched) {}
  ~SqlGroup() override { Stop(); }
  std::string AppPattern() const override { return "sqlgroup-%"; }
  std::string Table() const override { return kItemsTable; }
  void Start() override {
    ConsumerOptions options;
    options.dsn = config_.dsn;
    options.group = kGroup;
    options.instance = "bench";
    options.workers = config_.consumers;
    options.max_connections = 1 + config_.consumers;  // one per worker
    if (batched_) {
      options.claim_batch = config_.batch;
      options.batch_handler = [](const std::vector<Item>&, AckTransaction&) {
        return absl::OkStatus();
      };
    } else {
      options.claim_batch = config_.claim_batch;
      options.handler = [](const Item&, AckTransaction&) {
        return absl::OkStatus();
      };
    }
    auto consumer = Consumer::Create(std::move(options));
    if (!consumer.ok()) throw std::runtime_error(consumer.status().ToString());
    consumer_ = std::move(*consumer);
    const absl::Status s = consumer_->Start();
    if (!s.ok()) throw std::runtime_error(s.ToString());
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (static_cast<int>(consumer_->owned_parts().size()) < config_.parts) {
      if (absl::Now() > deadline) {
        throw std::runtime_error("the consumer never owned every part");
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  int64_t Done() const override { return consumer_->stats().acked; }
  int64_t Errors() const override {
    const auto st = consumer_->stats();
    return st.failed + st.lost_claims;
  }
  void Stop() override {
    if (consumer_) consumer_->Stop().IgnoreError();
  }

 private:
  const ThroughputConfig config_;
  const bool batched_;
  std::unique_ptr<Consumer> consumer_;
};

std::unique_ptr<System> MakeSystem(const ThroughputConfig& c) {
  if (c.system == "sqlgroup") return std::make_unique<SqlGroup>(c, false);
  if (c.system == "sqlgroup_batch") return std::make_unique<SqlGroup>(c, true);
  if (c.system == "skiplocked") return std::make_unique<SkipLocked>(c, false);
  if (c.system == "skiplocked_batch") {
    return std::make_unique<SkipLocked>(c, true);
  }
  if (c.system == "limit") return std::make_unique<DeleteLimit>(c, false);
  if (c.system == "limit_batch") return std::make_unique<DeleteLimit>(c, true);
  if (c.system == "readlimit")
    return std::make_unique<ReadDeleteLimit>(c, false);
  if (c.system == "readlimit_batch") {
    return std::make_unique<ReadDeleteLimit>(c, true);
  }
  throw std::invalid_argument(absl::StrCat("unknown --system=", c.system));
}

// WAL written and flushed, server-wide: the cost that bounds a durable
// queue (every system runs alone, so it is theirs).
struct WalCounters {
  int64_t bytes = 0;
  int64_t syncs = 0;
};

WalCounters ReadWal(pqxx::connection& conn) {
  pqxx::nontransaction tx(conn);
  const pqxx::row r = tx.exec1(
      "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, wal_sync FROM pg_stat_wal");
  return {static_cast<int64_t>(r[0].as<double>()), r[1].as<int64_t>()};
}

void EnsureGroup(const ThroughputConfig& c) {
  auto admin = Admin::Connect({.dsn = c.dsn});
  if (!admin.ok()) throw std::runtime_error(admin.status().ToString());
  const absl::Status s =
      (*admin)->CreateGroup({.name = kGroup, .parts = c.parts});
  if (!s.ok() && !absl::IsAlreadyExists(s)) {
    throw std::runtime_error(s.ToString());
  }
}

}  // namespace

bool RunThroughput(const ThroughputConfig& config) {
  EnsureGroup(config);
  std::unique_ptr<System> system = MakeSystem(config);
  auto conn = Connect(config.dsn, "bench-setup");
  const int64_t added =
      TopUp(*conn, system->Table(), kGroup, config.parts, config.backlog);
  // A checkpoint now, not in the middle of the window.
  pqxx::nontransaction(*conn).exec("CHECKPOINT");

  system->Start();
  absl::SleepFor(absl::Seconds(config.warmup_s));
  WaitSampler sampler(config.dsn, system->AppPattern(), absl::Milliseconds(20));
  const WalCounters w0 = ReadWal(*conn);
  const int64_t c0 = system->Done();
  const absl::Time t0 = absl::Now();
  const CpuSample cpu0 = SampleCpu();
  sampler.Start();
  absl::SleepFor(absl::Seconds(config.seconds));
  const int64_t c1 = system->Done();
  const absl::Time t1 = absl::Now();
  const CpuCost cpu = CostBetween(cpu0, SampleCpu(), c1 - c0);
  const WalCounters w1 = ReadWal(*conn);
  const WaitSummary waits = sampler.Stop();
  system->Stop();
  const int64_t left = CountItems(*conn, system->Table(), kGroup);
  // Items still waiting (beyond what the last claims held) mean the window
  // was never starved for work.
  const bool drained = left < static_cast<int64_t>(config.consumers) *
                                  std::max(config.batch, config.claim_batch);
  const double secs = absl::ToDoubleSeconds(t1 - t0);
  JsonLine()
      .Add("bench", "throughput")
      .Add("system", config.system)
      .Add("consumers", config.consumers)
      .Add("parts", config.parts)
      .Add("batch",
           config.system.find("batch") != std::string::npos ? config.batch : 1)
      .Add("items_per_s", static_cast<double>(c1 - c0) / secs)
      .Add("items", c1 - c0)
      .Add("seconds", secs)
      .Add("wal_bytes_per_item", static_cast<double>(w1.bytes - w0.bytes) /
                                     std::max<int64_t>(1, c1 - c0))
      .Add("wal_syncs_per_s", static_cast<double>(w1.syncs - w0.syncs) / secs)
      .Add("client_us_per_item", cpu.client_us_per_item)
      .Add("server_us_per_item", cpu.rest_us_per_item)
      .Add("machine_busy", cpu.machine_busy)
      .Add("backlog_added", added)
      .Add("left", left)
      .Add("drained", drained)
      .Add("errors", system->Errors())
      .Raw("waits", waits.Json())
      .Print();
  return !drained;
}

}  // namespace sqlgroup::bench
