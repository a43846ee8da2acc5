// What a handler sees: one work item, and the transaction in which its
// result is written and the item acknowledged.
//
//   absl::Status Handle(const sqlgroup::Item& item,
//                       sqlgroup::AckTransaction& ack) {
//     ack.work().exec_params("INSERT INTO results VALUES ($1, $2)",
//                            item.id, Process(item.payload));
//     return absl::OkStatus();  // the library deletes the item, fenced on
//   }                           // the part's take, and commits both
//
// Thread safety: an AckTransaction belongs to the worker thread that runs
// the handler; do not keep it or use it after the handler returns.
#ifndef SQLGROUP_ITEM_H_
#define SQLGROUP_ITEM_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <pqxx/connection>
#include <pqxx/transaction>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace sqlgroup {

struct Item {
  std::string id;                  // UUID text: its place in the key space
  std::optional<std::string> key;  // the producer's own key text, if any
  std::string payload;             // bytes, as enqueued
  // 1 on first delivery, +1 per delivery that ended without an ack: a
  // failure, a call cut off, or a member that died with it (counted by the
  // next owner of its part; see docs/GUARANTEES.md, "Attempts count
  // deliveries").
  int attempt = 1;
  int part = 0;  // the part whose range holds `id`
  // The claim this delivery is under: the member's session and its take
  // (epoch) of `part`, as in sqlgroup.ownership_log; the ack is fenced on
  // it. Useful to log, or to
  // record beside a result for audit.
  std::string session;
  int64_t epoch = 0;
  absl::Time enqueued_at;  // database clock
};

// The acknowledging transaction. It begins on the first call to work(), so
// a handler that does slow work outside the database before writing keeps
// the transaction (and its locks) short. The library commits it only if the
// fenced delete of the item removed exactly one row; otherwise it is rolled
// back and the handler's writes vanish with it. Do not commit or abort it
// yourself.
//
// It runs on the worker's connection, which always uses generic plans for
// prepared and parameterized statements (plan_cache_mode =
// force_generic_plan: the library's own statements are planned once per
// connection instead of on every item). A handler query that needs a plan
// for its actual parameter values can run `SET LOCAL plan_cache_mode =
// auto` first; it lasts until the transaction ends. JIT compilation is off
// on that connection (jit = off: with a large backlog PostgreSQL compiled
// every claim), and so are sequential and bitmap scans (enable_seqscan,
// enable_bitmapscan = off: a churning queue table looks nearly empty to
// the planner, which then read the whole table on every ack); a handler's
// query that gains from one of them can run `SET LOCAL jit = on` (or
// `enable_seqscan`, `enable_bitmapscan`) the same way, and should set
// enable_seqscan and enable_bitmapscan back off before it returns: the
// library's ack runs next in the same transaction, and a plan PostgreSQL
// remakes for it then is kept for the connection.
class AckTransaction {
 public:
  explicit AckTransaction(pqxx::connection& conn) : conn_(conn) {}
  AckTransaction(const AckTransaction&) = delete;
  AckTransaction& operator=(const AckTransaction&) = delete;

  // Begins the transaction on first use.
  pqxx::work& work();
  bool started() const { return work_.has_value(); }

 private:
  pqxx::connection& conn_;
  std::optional<pqxx::work> work_;
};

// Returns OK to acknowledge. A non-OK status or an exception is a failure:
// the transaction is rolled back and the item retried after a backoff
// (ConsumerOptions: backoff_initial doubling per attempt up to backoff_max,
// or later, see RetryAfterVerdict), or moved to dead_items after
// max_attempts, with the message as last_error.
// A pqxx::sql_error that says nothing of the item (a serialization failure
// or deadlock, a lock timeout, a server that cannot work now: out of disk,
// shutting down, read-only) is a conflict instead: retried after a backoff
// without counting an attempt, until the item has had 10 in a row.
using Handler = std::function<absl::Status(const Item&, AckTransaction&)>;

// A handler's verdict that retrying cannot help (a payload that will never
// parse, an order that no longer exists): returned instead of a plain
// error, the item goes to dead_items at once, with `why` as its
// last_error, instead of after max_attempts. From a BatchHandler it counts
// for a batch of one item only (a failed batch is retried item by item).
absl::Status DeadLetterVerdict(std::string_view why);
// True for a status made by DeadLetterVerdict.
bool IsDeadLetterVerdict(const absl::Status& status);

// A handler's verdict that this attempt failed and the item should not be
// tried again for at least `after`: what a dependency asked for (an HTTP
// 429 or 503 with Retry-After, a rate limit's reset time). It counts as a
// failed attempt like any other error (dead-lettered after max_attempts,
// with `why` as last_error); the next try comes after the usual backoff or
// after `after`, whichever is later, but `after` is capped at the
// consumer's backoff_max (ConsumerOptions), so a dependency cannot park an
// item for longer than the policy allows. A negative `after` counts as
// zero. The status is UNAVAILABLE. From a BatchHandler it counts for a
// batch of one item only (a failed batch is retried item by item at once).
absl::Status RetryAfterVerdict(absl::Duration after, std::string_view why);
// The wait asked for by a status made by RetryAfterVerdict (or one that
// carries its payload, e.g. copied with Status::ForEachPayload); nullopt
// for any other status, OK included.
std::optional<absl::Duration> RetryAfterOf(const absl::Status& status);

// A handler that is a SQL function, called by name (`schema.name`, or a
// name on the member role's search_path) in the very statement that
// acknowledges the item: its writes and the fenced delete commit together
// or not at all, in one round trip (a handler's AckTransaction takes
// four: BEGIN, the handler's statement, the ack, COMMIT). It is called as
// name(key text, payload bytea, id uuid), key NULL for an unkeyed item;
// with `arrays`, once per claimed batch as name(text[], bytea[], uuid[]),
// one element per item, in key order. Its result is ignored; it may not
// return a set, nor be STRICT for single items (PostgreSQL would skip the
// call for a NULL key). It is called only for items the fence lets the
// statement delete (never under a take that is gone), after their delete:
// everything it needs is in its arguments. It holds the take's lock while
// it runs, so on a direct connection it is canceled after half the
// group's TTL (statement_timeout), as an acknowledging transaction that
// pauses is; behind a transaction pooler, set statement_timeout on the
// member's role.
//
// An error it raises fails the attempt (retried after the backoff, dead-
// lettered after max_attempts with the database's message); raised with
// SQLSTATE kDeadLetterSqlState (RAISE EXCEPTION '...' USING ERRCODE =
// 'SGDLQ') it dead-letters the item at once; a serialization failure,
// deadlock or lock timeout is retried without counting an attempt (until
// the same item has had 10 in a row), and so is an error that says the
// server cannot work now (out of disk, shutting down, read-only).
struct SqlFunction {
  std::string name;  // empty: no SQL function
  bool arrays = false;
};

// The SQLSTATE a SQL handler raises to dead-letter an item at once.
inline constexpr char kDeadLetterSqlState[] = "SGDLQ";

// Acknowledges all `items` (same part, key order) in one transaction: the
// biggest throughput lever. On failure the items are retried one by one
// (each in a batch of one), so one poisonous item cannot sink the others.
using BatchHandler =
    std::function<absl::Status(const std::vector<Item>&, AckTransaction&)>;

}  // namespace sqlgroup

#endif  // SQLGROUP_ITEM_H_
