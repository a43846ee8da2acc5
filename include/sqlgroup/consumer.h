// A member of a consumer group: it registers a session, heartbeats it,
// reaps expired sessions, owns the parts the lexical assignment gives it,
// and runs the handler on the items of those parts, acknowledging each
// exactly once.
//
//   sqlgroup::ConsumerOptions options;
//   options.dsn = "host=db dbname=app";
//   options.group = "emails";
//   options.handler = [](const sqlgroup::Item& item,
//                        sqlgroup::AckTransaction& ack) {
//     ack.work().exec_params("INSERT INTO sent VALUES ($1)", item.id);
//     return absl::OkStatus();
//   };
//   auto consumer = sqlgroup::Consumer::Create(std::move(options));
//   if (!consumer.ok()) return consumer.status();
//   RETURN_IF_ERROR((*consumer)->Start());
//   ...
//   (*consumer)->Stop();  // drains, leaves the group at once
//
// Thread safety: Start(), Stop() and the accessors are safe to call from
// any thread. Handlers run concurrently on the worker threads, one item (or
// batch) of a part at a time.
#ifndef SQLGROUP_CONSUMER_H_
#define SQLGROUP_CONSUMER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sqlgroup/assignor.h"
#include "sqlgroup/connection_budget.h"
#include "sqlgroup/item.h"
#include "sqlgroup/pool_mode.h"
#include "sqlgroup/shared_heartbeat.h"

namespace spdlog {
class logger;
}
namespace prometheus {
class Registry;
}

namespace sqlgroup {

// Like Kafka's ConsumerRebalanceListener. Called on the member's control
// thread; keep the callbacks short. An exception thrown from a callback is
// logged and otherwise ignored: the rebalance goes on.
class RebalanceListener {
 public:
  virtual ~RebalanceListener() = default;
  // Parts just taken; their consumers start right after.
  virtual void OnPartsAssigned(const std::vector<int>& parts) { (void)parts; }
  // Parts given up gracefully, after every handler call on them returned
  // (see drain_timeout) and before ownership is released.
  virtual void OnPartsRevoked(const std::vector<int>& parts) { (void)parts; }
  // Parts taken away without a drain: the session expired or was reaped.
  // Their claims are already void; nothing of them can be acknowledged.
  virtual void OnPartsLost(const std::vector<int>& parts) { (void)parts; }
};

// The group's TTL and heartbeat interval are settings of the group
// (Admin::CreateGroup/AlterGroup), not of a member: every member must judge
// expiry alike.
struct ConsumerOptions {
  // libpq connection string; empty: libpq's PG* variables. A multi-host
  // string with target_session_attrs=read-write follows a failover.
  std::string dsn;
  // The group to join; must exist. Required.
  std::string group;
  // Optional name shown by describe and in metrics (e.g. a pod name).
  std::string instance;
  // With an instance name (letters, digits and "_.-"), makes the member
  // static: a new process with the same name takes the place of the old one
  // at once (the newest wins; the old one, if still running, stops with
  // FAILED_PRECONDITION naming the instance), and a graceful Stop() keeps
  // the member's place and its parts, unconsumed, for this long, so a
  // restart within it moves no part. Leave() instead hands the parts over
  // at once. Zero (the default): a dynamic member. At least the group's
  // heartbeat interval.
  absl::Duration static_timeout = absl::ZeroDuration();
  // Exactly one of the three is required. sql_function (item.h) is the
  // fastest for work that is a write to this database: the handler and the
  // ack are one statement. Create() checks that the function exists for
  // those arguments and that the member's role may call it.
  Handler handler;
  BatchHandler batch_handler;
  SqlFunction sql_function;
  // With a sql_function of single items: up to this many calls share one
  // transaction and one commit, each under a savepoint of its own, for
  // items of no key (and every item under ordering 'none'): a worker
  // commits its calls together once it has no item at hand or 5 ms have
  // passed. Still exactly once (a call's writes commit with its item's ack
  // or not at all) and a call that raises undoes only its own work; but
  // the calls of one transaction share its locks, SET LOCAL settings and
  // now(), so functions that lock rows in different orders can deadlock.
  // 1..32 (each call is a subtransaction; PostgreSQL keeps 64 a transaction
  // in shared memory). Default 1: a commit per call. Ignored behind a
  // pooler in transaction mode.
  int sql_calls_per_commit = 1;
  // Optional; not owned; must outlive the consumer.
  RebalanceListener* listener = nullptr;
  // Optional; null logs nothing.
  std::shared_ptr<spdlog::logger> logger;
  // Optional; metrics are registered here. Not owned; must outlive the
  // consumer.
  prometheus::Registry* metrics = nullptr;
  // Optional assignor, for one of your own. By default a member uses the
  // group's (`group create --assignor lexical|sticky`, stored with the
  // group), so every member assigns alike; one set here overrides it, and
  // every member of the group must then set the same.
  std::shared_ptr<const Assignor> assignor;

  // Worker threads that serve all owned parts in turn, each item on a
  // connection of its own (within max_connections). 1..256. Default 2.
  int workers = 2;
  // The most database connections to `dsn` this consumer holds at once:
  // one control connection for as long as it runs, and worker connections
  // opened while its parts have work, closed after
  // idle_connection_timeout without any. The first claim after a quiet
  // spell runs on the control connection (already open, its statements
  // ready), when it is free, and the worker opens its own after it: should
  // a handler keep the control connection past a heartbeat, the consumer
  // leaves it to that handler and opens another on the worker's slot. A
  // worker without a connection of its own (the budget is spent, or the
  // server refuses new connections) runs its tasks on the control
  // connection between the control thread's rounds: a consumer with a
  // budget of 1 still makes progress.
  // 1..10000. Default 3: the control connection and one per worker.
  // Ignored when connection_budget is set.
  int max_connections = 3;
  // Optional: one budget shared with the process's other consumers (and
  // their shared heartbeat); see connection_budget.h. Create() keeps a
  // slot of it for the control connection until Stop(), and fails with
  // RESOURCE_EXHAUSTED when none is left.
  std::shared_ptr<ConnectionBudget> connection_budget;
  // A worker's own connection is closed after this long without a task.
  // >= 100 ms. Default 10 s.
  absl::Duration idle_connection_timeout = absl::Seconds(10);
  // Items claimed per claim query. 1..10000. Default 64.
  int claim_batch = 64;
  // Membership is re-read at least this often when the member cannot
  // LISTEN (use_notify off, or LISTEN failed). Also, a fifth of it, how
  // often a member that waits for parts others must release re-reads.
  // Default 500 ms.
  absl::Duration rebalance_poll = absl::Milliseconds(500);
  // While the member LISTENs, joins, leaves and reaps wake every member at
  // once, a drop wakes the member that takes the part, and a watched
  // heartbeat (at least one a TTL) reports a fingerprint of the live members
  // (their number and newest join: a change without a NOTIFY shows within a
  // TTL and a heartbeat interval); this poll is only the last safety net.
  // >= rebalance_poll. Default 30 s.
  absl::Duration rebalance_poll_listening = absl::Seconds(30);
  // Idle parts are re-checked for new items at least this often even
  // without a NOTIFY from a producer. Default 250 ms.
  absl::Duration idle_poll = absl::Milliseconds(250);
  // While the member LISTENs and has seen no sign of work (an item claimed or
  // found, a producer's NOTIFY) for 10 s, idle parts are probed this often
  // instead. Nothing announced waits for it: a producer's NOTIFY wakes the
  // member at once, and items due later are probed for when they fall due
  // (the Producer announces delayed items, a worker notes the retries it
  // schedules, and every probe returns when the soonest of the first 100
  // waiting items of each probed part falls due). What nobody announces may
  // be found up to this late: rows inserted by plain SQL without `SELECT
  // pg_notify('sqlgroup', 'items:' || group)`, and a producer with notify
  // off. >= idle_poll. Default 10 s.
  absl::Duration idle_poll_listening = absl::Seconds(10);
  // How often the lag of the owned parts is measured for the metrics
  // (sqlgroup_part_lag_items, ..._oldest_item_age_seconds). Zero: never.
  // Never measured without a `metrics` registry. Default 5 s.
  absl::Duration lag_interval = absl::Seconds(5);
  // On a revoke or a graceful stop, how long the handler calls in flight on
  // the parts that move may run before they are cut off (cut_off, below).
  // Whatever this is, a part is handed over only once every call on it
  // has returned, so no item ever runs on two live members at once; only a
  // dead or paused member (kill -9, SIGSTOP past the TTL) can leave one
  // running, and the fence refuses its ack. Set it to what the handler
  // may take. >= 0. Default 30 s.
  absl::Duration drain_timeout = absl::Seconds(30);
  // Optional: makes the handler calls in flight on the items of `parts`
  // claimed under `session` (Item::part, Item::session) return soon with an
  // error, e.g. by killing a child process or abandoning a request; each
  // such delivery counts as an attempt and its item is retried after the
  // backoff. Called on the member's control thread once a revoke or a
  // graceful stop has waited drain_timeout for those parts (and again,
  // every few milliseconds, while calls on them still run), and at once
  // for the parts of a session the member lost (their acks will be
  // refused, and another member may be running their items). Must be
  // quick and must not throw. Null: the parts wait for their handler calls
  // to return, however long they take.
  std::function<void(const std::string& session, const std::vector<int>& parts)>
      cut_off;
  // Failed deliveries before an item moves to dead_items. >= 1. Default
  // 25: with the default backoff, an item that keeps failing is
  // dead-lettered 2 h 37 min after its first failure (2 h 5 min at the
  // least, with the jitter), so an hour's outage of what the handler calls
  // costs retries, not dead letters. docs/HANDLERS.md has the table.
  int max_attempts = 25;
  // After failed attempt n the item waits backoff_initial * 2^(n-1),
  // capped at backoff_max, times a random factor in [0.8, 1.2) (or longer
  // if the handler asked, see RetryAfterVerdict in item.h, never beyond
  // backoff_max for that). Its key waits with it. Defaults 1 s and 10 min:
  // 1, 2, 4, ... 512 s, then 10 min per try, so a dependency that comes
  // back is tried again within 12 min. backoff_initial > 0, backoff_max >=
  // backoff_initial.
  absl::Duration backoff_initial = absl::Seconds(1);
  absl::Duration backoff_max = absl::Minutes(10);
  // Bound on one connection attempt. Default 5 s.
  absl::Duration connect_timeout = absl::Seconds(5);
  // Wake on PostgreSQL LISTEN/NOTIFY; false polls only (e.g. CockroachDB).
  bool use_notify = true;
  // How the dsn reaches the database (pool_mode.h): by default found out
  // by Create. Through a pooler in transaction mode nothing relies on
  // session state (no named prepared statements, no session SET), and
  // LISTEN needs listen_dsn (docs/POOLERS.md).
  PoolMode pool_mode = PoolMode::kAuto;
  // Optional: a connection string to LISTEN on, straight to the database
  // (a pooler in transaction mode cannot carry a LISTEN). One connection
  // per consumer, idle but for NOTIFYs. Empty: LISTEN on the control
  // connection, or (behind a pooler in transaction mode) poll.
  std::string listen_dsn;
  // Optional: heartbeat together with the process's other consumers given
  // the same one (see shared_heartbeat.h): one statement per interval for
  // all of them. Created for the same dsn. Null: this consumer heartbeats
  // over its own control connection.
  std::shared_ptr<SharedHeartbeat> shared_heartbeat;

  // INVALID_ARGUMENT naming the field.
  absl::Status Validate() const;
};

// Counters since Create(); a consistent snapshot of each, not of all.
struct ConsumerStats {
  int64_t claimed = 0;
  // Claims that went out with the previous batch's ack, one round trip for
  // both (a batch handler that wrote nothing, no other part waiting), and
  // next items of a key read by the ack of the one before.
  int64_t carried_claims = 0;
  int64_t acked = 0;
  int64_t failed = 0;  // handler failures (each retried or dead)
  int64_t dead_lettered = 0;
  int64_t lost_claims = 0;  // acks refused by the fence
  int64_t sessions_lost = 0;
  int64_t rebalances = 0;         // changes of this member's target parts
  absl::Duration last_rebalance;  // until the target was all owned
  // Database connections held now (control, workers', listen) and at most.
  int64_t connections = 0;
  int64_t peak_connections = 0;
  // Connection attempts the server refused for now (53300, 57P03).
  int64_t connections_refused = 0;
  // Worker tasks run on the borrowed control connection.
  int64_t borrowed_tasks = 0;
};

class Consumer {
 public:
  enum class State { kCreated, kRunning, kStopping, kStopped, kFailed };

  // Validates the options, connects, and checks the schema version and
  // that the group exists. Does not join yet. INVALID_ARGUMENT,
  // UNAVAILABLE, FAILED_PRECONDITION (schema), NOT_FOUND (group),
  // RESOURCE_EXHAUSTED (the connection budget has no slot left).
  static absl::StatusOr<std::unique_ptr<Consumer>> Create(
      ConsumerOptions options);
  ~Consumer();  // Stop()

  // Registers a session and starts the threads. FAILED_PRECONDITION if
  // called twice.
  absl::Status Start();
  // Graceful: stops claiming, lets the handler calls in flight finish (cut
  // off after drain_timeout, see cut_off; without cut_off, Stop waits for
  // them however long they take), deletes the session (its parts move at
  // once), joins every thread. Idempotent. Returns the error that
  // stopped the member early, if any (e.g. the group was deleted).
  absl::Status Stop();
  // Stop(), and a static member leaves for good (scale-down): its session
  // is deleted and its parts move at once. The same as Stop() for a
  // dynamic member.
  absl::Status Leave();

  State state() const;
  // The current session id; empty before Start() or while re-registering.
  std::string session_id() const;
  // Parts owned right now, ascending.
  std::vector<int> owned_parts() const;
  ConsumerStats stats() const;
  // The handler fails every item (an outage of what it calls): the
  // member's circuit breaker is open, and hands the handler no item but a
  // probe now and then (docs/HANDLERS.md).
  bool circuit_open() const;

  class Impl;

 private:
  explicit Consumer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

const char* StateName(Consumer::State state);

}  // namespace sqlgroup

#endif  // SQLGROUP_CONSUMER_H_
