#include "cli/load_generator.h"

#include <cstdio>
#include <functional>
#include <pqxx/pqxx>

#include "absl/flags/flag.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cli/flags.h"
#include "cli/handlers/handler_spec.h"
#include "cli/numbered_items.h"
#include "cli/subcommands.h"
#include "dsn.h"
#include "member/backoff.h"
#include "sqlgroup/producer.h"
#include "status_macros.h"
#include "store/connection.h"
#include "store/errors.h"

namespace sqlgroup::cli {
namespace {

// The generator's connection's options: a producer's, in `mode`.
store::ConnectOptions ProduceConnectOptions(PoolMode mode) {
  store::ConnectOptions options =
      store::ProducerOptions("sqlgroup-produce", absl::Seconds(5));
  store::SetPoolMode(options, mode);
  return options;
}

struct BatchOutcome {
  absl::Status status;
  int retries = 0;
};

// Runs `enqueue` in a transaction and commits it, through lost
// connections, restarts and failovers, for up to `retry_for`. Each try
// first claims the batch's idempotency key (forgetting `previous`, the
// last batch's) in its transaction, before anything else is written (the
// per-key tally included): if an earlier try committed, the claim says so
// and nothing is sent again; if an earlier try is still running on a
// connection the server has not dropped yet, the claim waits for its end.
// Logs once when retries start and once when they end.
BatchOutcome EnqueueBatchWithRetries(
    const ProduceTarget& target, absl::Duration retry_for,
    std::unique_ptr<pqxx::connection>& conn, int64_t sent,
    const std::function<absl::StatusOr<std::vector<std::string>>(pqxx::work&)>&
        enqueue,
    const std::string& key, const std::string& previous) {
  const absl::Time began = absl::Now();
  BatchOutcome out;
  bool in_doubt = false;
  for (;;) {
    absl::Status inner;
    bool already_in = false;
    absl::Status s = absl::OkStatus();
    if (!conn) {
      auto c = store::Connect(target.dsn, ProduceConnectOptions(target.mode));
      if (c.ok()) {
        conn = std::move(*c);
      } else {
        s = c.status();
      }
    }
    if (s.ok()) {
      s = store::Guard("enqueue", [&] {
        pqxx::work tx(*conn);
        store::LocalLimits(tx);
        // A topic's keys are its own (schema 20).
        already_in =
            !tx.exec_params1(target.topic.empty()
                                 ? "SELECT sqlgroup.claim_enqueue_key($1, $2, "
                                   "'{}'::uuid[], nullif($3, ''))"
                                 : "SELECT sqlgroup.claim_publish_key($1, $2, "
                                   "nullif($3, ''))",
                             target.topic.empty() ? target.group : target.topic,
                             key, previous)[0]
                 .as<bool>();
        if (already_in) return;  // rolls back: nothing to write
        auto ids = enqueue(tx);
        if (!ids.ok()) {
          inner = ids.status();
          return;  // rolls back
        }
        tx.commit();
      });
    }
    if (absl::IsUnknown(s)) in_doubt = true;
    const absl::Status why = s.ok() ? inner : s;
    if (why.ok()) {
      if (out.retries > 0) {
        CliLogger()->info(
            "produce: the database answers again after {:.1f} s and {} "
            "retries; {}; going on",
            absl::ToDoubleSeconds(absl::Now() - began), out.retries,
            already_in ? "the batch in doubt had been enqueued, and was not "
                         "sent again"
                       : "the batch is enqueued, once");
      }
      return out;
    }
    if (!store::EnqueueWorthRetrying(why)) {
      out.status = why;
      return out;
    }
    if (absl::IsUnavailable(why) || absl::IsUnknown(why)) conn.reset();
    const absl::Duration pause =
        Backoff(out.retries + 1, absl::Milliseconds(100), absl::Seconds(2));
    if (absl::Now() + pause > began + retry_for) {
      out.status = absl::UnavailableError(absl::StrCat(
          "gave up after ", sent, " items: the database could not be used for ",
          absl::FormatDuration(retry_for), " (--retry_for; ", out.retries + 1,
          " tries; last: ", why.message(), "). The batch in flight ",
          in_doubt ? "may have been enqueued (its commit was cut off); "
                     "nothing was enqueued twice"
                   : "was not enqueued",
          ". Check that the database is running and reachable, then produce "
          "the rest; raise --retry_for to wait longer"));
      return out;
    }
    if (out.retries == 0) {
      CliLogger()->warn(
          "produce: enqueue failed after {} items ({}); retrying for up to "
          "{} without sending any batch twice",
          sent, std::string(why.message()), absl::FormatDuration(retry_for));
    }
    ++out.retries;
    absl::SleepFor(pause);
  }
}

}  // namespace

absl::Status RetryWhileUnavailable(absl::Duration retry_for,
                                   const std::function<absl::Status()>& f) {
  const absl::Time deadline = absl::Now() + retry_for;
  for (int tries = 1;; ++tries) {
    const absl::Status s = f();
    const absl::Duration pause =
        Backoff(tries, absl::Milliseconds(100), absl::Seconds(2));
    if (!absl::IsUnavailable(s) || store::RefusedForGood(s) ||
        absl::Now() + pause > deadline) {
      return s;
    }
    if (tries == 1) {
      CliLogger()->warn("produce: cannot start yet ({}); retrying for up to {}",
                        std::string(s.message()),
                        absl::FormatDuration(retry_for));
    }
    absl::SleepFor(pause);
  }
}

absl::Status RunGenerate(const ProduceTarget& target) {
  const int64_t count = absl::GetFlag(FLAGS_count);
  const int keys = absl::GetFlag(FLAGS_keys);
  const int payload_bytes = absl::GetFlag(FLAGS_payload_bytes);
  const double rate = absl::GetFlag(FLAGS_rate);
  if (count < 0 || keys < 0 || payload_bytes < 0 || rate < 0) {
    return absl::InvalidArgumentError(
        "--count, --keys, --payload_bytes and --rate must not be negative");
  }
  if (static_cast<size_t>(payload_bytes) > kDefaultMaxPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--payload_bytes=", payload_bytes, " is over the limit of ",
        kDefaultMaxPayloadBytes,
        " bytes per item (ProducerOptions::max_payload_bytes); keep large "
        "data in a table of its own and enqueue its key"));
  }
  const std::string& group = target.group;
  const std::string& topic = target.topic;
  const std::string& dsn = target.dsn;
  const absl::Duration retry_for = target.retry_for;
  // Producer::Create checks the schema and the group; batches then go
  // through EnqueueIn so the per-key tally (and with it each keyed item's
  // number) commits with the items.
  // A run that starts while the database restarts or fails over waits
  // for it, as a batch does.
  std::unique_ptr<pqxx::connection> conn;
  RETURN_IF_ERROR(RetryWhileUnavailable(retry_for, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto checked, Producer::Create({.dsn = dsn,
                                                     .group = group,
                                                     .topic = topic,
                                                     .pool_mode = target.mode,
                                                     .logger = CliLogger()}));
    checked.reset();
    ASSIGN_OR_RETURN(conn,
                     store::Connect(dsn, ProduceConnectOptions(target.mode)));
    if (keys > 0) RETURN_IF_ERROR(EnsureDemoTables(dsn));
    return absl::OkStatus();
  }));
  // Paced: a batch every 50 ms; unpaced: batches of 500.
  const int64_t batch =
      rate > 0 ? std::max<int64_t>(1, static_cast<int64_t>(rate / 20)) : 500;
  NewItem unkeyed;
  unkeyed.payload = std::string(payload_bytes, 'x');
  // Each batch carries an idempotency key (this run's id and the batch's
  // number) and forgets the previous batch's: a batch whose commit was
  // lost with the connection is found by its key, never sent twice.
  absl::BitGen gen;
  const std::string run = absl::StrCat(
      "produce:", absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
  const absl::Time start = absl::Now();
  int64_t sent = 0;
  int64_t batches = 0;
  int64_t retries = 0;
  while (sent < count) {
    const int64_t n = std::min(batch, count - sent);
    const std::string key = absl::StrCat(run, ":", batches);
    const std::string previous =
        batches == 0 ? "" : absl::StrCat(run, ":", batches - 1);
    BatchOutcome outcome = EnqueueBatchWithRetries(
        target, retry_for, conn, sent,
        [&](pqxx::work& tx) {
          std::vector<NewItem> items(n, unkeyed);
          if (keys > 0) {
            std::vector<std::string> item_keys(n);
            for (int64_t i = 0; i < n; ++i) {
              item_keys[i] = absl::StrCat("k", (sent + i) % keys);
            }
            items = NumberedItems(tx, item_keys, payload_bytes);
          }
          return topic.empty() ? Producer::EnqueueIn(tx, group, items)
                               : Producer::PublishIn(tx, topic, items);
        },
        key, previous);
    retries += outcome.retries;
    if (!outcome.status.ok()) return outcome.status;
    sent += n;
    ++batches;
    if (rate > 0) {
      const absl::Time due = start + absl::Seconds(sent / rate);
      absl::SleepFor(due - absl::Now());
    }
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("produced %lld items into %s in %.2f s (%.0f/s)%s\n",
              static_cast<long long>(sent),
              (topic.empty() ? group : absl::StrCat("topic ", topic)).c_str(),
              secs, secs > 0 ? sent / secs : 0.0,
              retries > 0 ? absl::StrCat(", ", retries,
                                         " retries, no batch added twice")
                                .c_str()
                          : "");
  return absl::OkStatus();
}

}  // namespace sqlgroup::cli
