// Enqueues work items into a group. An item with a key goes in its key's
// place in the key space (the key's 64-bit block, from the MD5 of its
// bytes: docs/KEYS.md), so all items of a key are in one part for any part
// count, and its id grows with the enqueue time among that key's items: a
// group with ordering 'key' (the default) hands them to handlers in that
// order, one at a time. Items without a key are dealt to the parts in turn
// from a random one, in runs of neighbours (items/parts of them, 1 to 64):
// a small call reaches as many parts as it has items, and a large one lands
// on each part's pages in runs, so a claim touches fewer pages. An item's
// id is a UUID-typed key, not of any RFC version.
//
//   auto producer = sqlgroup::Producer::Create({.dsn = dsn, .group = "g"});
//   auto ids = (*producer)->Enqueue({{.key = "user-7", .payload = "hi"}});
//
//   // Or inside your own transaction, atomically with your own writes:
//   pqxx::work tx(conn);
//   sqlgroup::Producer::EnqueueIn(tx, "g", items);
//   tx.commit();
//
// Exactly once: a Producer has an identity and numbers its batches; each
// batch's idempotency key is recorded with its items, so Enqueue's own
// retries (a lost connection, a commit in doubt) never add a batch twice.
//
// Thread safety: a Producer holds one connection and is not safe for
// concurrent use; EnqueueIn is as safe as the transaction given to it.
#ifndef SQLGROUP_PRODUCER_H_
#define SQLGROUP_PRODUCER_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <pqxx/transaction>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "spdlog/logger.h"
#include "sqlgroup/pool_mode.h"

namespace sqlgroup {

// The default bound on one item's payload. Items travel whole through
// every claim and handler call; larger data belongs in a table of its own,
// with the item holding its key.
inline constexpr size_t kDefaultMaxPayloadBytes = 1 << 20;  // 1 MiB

struct NewItem {
  // Places the item and orders it among the items of the same key (a key's
  // items are enqueue-ordered by this process's clock: produce one key
  // from one process, or from clocks in step, for a strict order). None:
  // no order with any other item.
  std::optional<std::string> key;
  std::string payload;   // bytes, at most max_payload_bytes
  absl::Duration delay;  // not delivered before now + delay
};

struct ProducerOptions {
  std::string dsn;    // empty: libpq's PG* variables
  std::string group;  // must exist
  // Instead of `group`: publishes to this topic (schema 20), i.e. into
  // every group that reads it when each batch commits, with the same ids
  // in each (docs/TOPICS.md). The same batching and exactly-once retries;
  // a publish always wakes the groups' members (`notify` is not used).
  std::string topic;
  // One NOTIFY per Enqueue call wakes idle members at once (and, for
  // delayed items, one more tells them when the soonest falls due);
  // without it they notice within their idle poll.
  bool notify = true;
  // Larger payloads are refused with INVALID_ARGUMENT, and nothing of the
  // call is enqueued. Default kDefaultMaxPayloadBytes (1 MiB).
  size_t max_payload_bytes = kDefaultMaxPayloadBytes;
  // Bound on reaching the server (libpq counts whole seconds, at least 1).
  // Default 5 s.
  absl::Duration connect_timeout = absl::Seconds(5);
  // How the dsn reaches the database (pool_mode.h): by default found out
  // by Create, said once to the logger (if any).
  PoolMode pool_mode = PoolMode::kAuto;
  // How long Enqueue keeps trying one batch through a lost connection, a
  // database restart or failover, or a commit whose outcome is unknown,
  // with growing pauses (100 ms up to 2 s, jittered), before it returns an
  // error. Retries never duplicate: each batch carries an idempotency key
  // (schema 10). Zero: one try. Default 60 s.
  absl::Duration retry_for = absl::Seconds(60);
  // Optional; told once per episode when a batch needs retries, and when
  // it got through. Null logs nothing.
  std::shared_ptr<spdlog::logger> logger;
};

// For EnqueueIn.
struct EnqueueOptions {
  bool notify = true;  // as ProducerOptions::notify
  size_t max_payload_bytes = kDefaultMaxPayloadBytes;
  // Optional: an application's own request id. The first enqueue with it
  // in the group adds the items; any later one (within 24 hours) adds
  // nothing and returns the first one's ids, whether or not the items were
  // consumed since. Makes a retry of the caller's transaction safe.
  std::string idempotency_key;
  // Optional: a key of an earlier enqueue of this group to forget in the
  // same transaction. A sequence of batches that is retried only at its
  // head (batch n's key, forgetting n-1's) keeps one key, not one a batch.
  std::string forget_key;
};

class Producer {
 public:
  // Connects and checks the schema and the group. UNAVAILABLE,
  // FAILED_PRECONDITION, NOT_FOUND.
  static absl::StatusOr<std::unique_ptr<Producer>> Create(
      ProducerOptions options);
  ~Producer();

  // Enqueues all items in one transaction, exactly once; returns their
  // ids in order. Items of one key in one call are ordered as given.
  // Through a lost connection or a commit in doubt it tries again (up to
  // retry_for), with the batch's idempotency key, so a batch that did
  // commit is never added twice. Errors: INVALID_ARGUMENT (payload too
  // large; nothing enqueued), NOT_FOUND (group deleted), UNAVAILABLE (the
  // database could not be reached for retry_for: the batch is known NOT
  // enqueued), UNKNOWN (a commit's outcome could not be learned within
  // retry_for: the batch may be enqueued; call Enqueue again with the same
  // items to settle it: that adds them only if they are not there).
  absl::StatusOr<std::vector<std::string>> Enqueue(
      const std::vector<NewItem>& items);

  // Tries beyond the first that Enqueue needed, since Create.
  int64_t retries() const;

  // Enqueues into the caller's transaction; visible when it commits. An
  // id another transaction took first (one key, one microsecond, 12 bits
  // of noise alike: rare) fails the call with ALREADY_EXISTS and aborts the
  // transaction: run it again. The
  // NOTIFY of delayed items counts their delay from the commit: a long
  // transaction makes idle members probe for them late, never early.
  static absl::StatusOr<std::vector<std::string>> EnqueueIn(
      pqxx::work& tx, const std::string& group,
      const std::vector<NewItem>& items, bool notify = true,
      size_t max_payload_bytes = kDefaultMaxPayloadBytes);

  // The same, with options (an idempotency key). Your transaction is the
  // unit: its items commit with it or not at all, and if its COMMIT is
  // lost with the connection you cannot tell which; with an
  // idempotency_key, running the whole transaction again is safe for the
  // items (your own writes need their own key).
  static absl::StatusOr<std::vector<std::string>> EnqueueIn(
      pqxx::work& tx, const std::string& group,
      const std::vector<NewItem>& items, const EnqueueOptions& options);

  // Publishes to a topic in your transaction, as EnqueueIn enqueues into a
  // group: every group that reads the topic when it commits gets each
  // item, with one id. NOT_FOUND (no such topic), FAILED_PRECONDITION (no
  // group reads it: nothing is published), INVALID_ARGUMENT, and errors
  // that abort the transaction.
  static absl::StatusOr<std::vector<std::string>> PublishIn(
      pqxx::work& tx, const std::string& topic,
      const std::vector<NewItem>& items, const EnqueueOptions& options = {});

 private:
  struct Impl;
  explicit Producer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_PRODUCER_H_
