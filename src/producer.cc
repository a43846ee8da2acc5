#include "sqlgroup/producer.h"

#include <optional>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "grant_hint.h"
#include "md5.h"
#include "member/backoff.h"
#include "pooler_found.h"
#include "status_macros.h"
#include "store/connect_options.h"
#include "store/db_connection.h"
#include "store/enqueue_store.h"
#include "store/grant_check.h"
#include "store/group_store.h"
#include "store/publish_store.h"
#include "store/schema_store.h"
#include "store/topic_store.h"

namespace sqlgroup {
namespace {

// A batch's fingerprint: a call with other items after an in-doubt one is
// a new batch, not a retry of it.
std::string Fingerprint(const std::vector<NewItem>& items) {
  std::string all;
  for (const NewItem& item : items) {
    absl::StrAppend(&all, item.key ? "k" : "-", item.key.value_or(""), "|",
                    item.payload.size(), ":", item.payload, "|",
                    absl::ToInt64Microseconds(item.delay), ";");
  }
  const auto digest = Md5(all);
  return std::string(digest.begin(), digest.end());
}

std::string NewProducerId() {
  absl::BitGen gen;
  return absl::StrCat(
      absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16),
      absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
}

}  // namespace

struct Producer::Impl {
  ProducerOptions options;
  // What the batches go to, for messages: "group 'g'" or "topic 't'".
  std::string target;
  std::optional<store::DbConnection> conn;  // none after a broken one
  // This producer's identity in its batches' idempotency keys.
  const std::string id = NewProducerId();
  int64_t batch = 1;    // the next batch's number; advances on success only
  std::string pending;  // fingerprint of a batch left in doubt, if any
  int64_t retries = 0;

  std::string Key(int64_t n) const {
    return n < 1 ? "" : absl::StrCat("producer:", id, ":", n);
  }

  absl::Status Connect() {
    store::ConnectOptions connect =
        store::ProducerOptions("sqlgroup-producer", options.connect_timeout);
    store::SetPoolMode(connect, options.pool_mode);
    ASSIGN_OR_RETURN(conn, store::DbConnection::Open(options.dsn, connect));
    // Found out once: reconnections open in the mode found.
    if (options.pool_mode == PoolMode::kAuto) {
      options.pool_mode = internal::Resolved(options.pool_mode,
                                             store::TransactionPooled(*conn));
      if (options.pool_mode == PoolMode::kTransaction && options.logger) {
        options.logger->info(
            internal::PoolerFound(absl::StrCat("the producer into ", target)));
      }
    }
    return absl::OkStatus();
  }
};

Producer::Producer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Producer::~Producer() {
  // The last batch's key is no longer needed by anyone: this producer
  // will not retry it. Best effort; expired keys go anyway.
  if (impl_->conn && impl_->batch > 1 && impl_->pending.empty()) {
    const std::string last = impl_->Key(impl_->batch - 1);
    (void)(impl_->options.topic.empty()
               ? store::ForgetEnqueueKey(*impl_->conn, impl_->options.group,
                                         last)
               : store::ForgetPublishKey(*impl_->conn, impl_->options.topic,
                                         last));
  }
}

absl::StatusOr<std::unique_ptr<Producer>> Producer::Create(
    ProducerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  const std::string& topic = impl->options.topic;
  if (!topic.empty() && !impl->options.group.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a producer sends to a group or to a topic, and this one names "
        "group ",
        impl->options.group, " and topic ", topic,
        ": give one (a topic reaches every group that reads it)"));
  }
  impl->target = topic.empty()
                     ? absl::StrCat("group '", impl->options.group, "'")
                     : absl::StrCat("topic '", topic, "'");
  absl::Status s = impl->Connect();
  if (s.ok()) s = store::CheckSchema(*impl->conn).status();
  if (s.ok() && !topic.empty()) {
    s = store::CheckTopicsStored(*impl->conn);
    if (s.ok()) {
      s = store::ListTopics(*impl->conn, topic, /*count_waiting=*/false)
              .status();
    }
    if (!s.ok()) return s;
  } else if (s.ok()) {
    s = store::MissingOrNotGranted(
        *impl->conn, "producer", impl->options.group,
        store::ReadGroupConfig(*impl->conn, impl->options.group).status());
  }
  if (!s.ok()) {
    return internal::WithGrantHint(s, impl->options.dsn, "producer",
                                   impl->options.group);
  }
  return std::unique_ptr<Producer>(new Producer(std::move(impl)));
}

int64_t Producer::retries() const { return impl_->retries; }

absl::StatusOr<std::vector<std::string>> Producer::Enqueue(
    const std::vector<NewItem>& items) {
  Impl& p = *impl_;
  // One batch number never stands for two contents: after a call that
  // may have committed (pending), the same items retry it under its key
  // and other items take the next number.
  const std::string fingerprint = Fingerprint(items);
  if (!p.pending.empty() && p.pending != fingerprint) {
    ++p.batch;
    p.pending.clear();
  }
  const EnqueueOptions options{.notify = p.options.notify,
                               .max_payload_bytes = p.options.max_payload_bytes,
                               .idempotency_key = p.Key(p.batch),
                               .forget_key = p.Key(p.batch - 1)};
  const absl::Time deadline = absl::Now() + p.options.retry_for;
  // Some try, of this call or of an earlier one with these items, may
  // have committed.
  bool in_doubt = !p.pending.empty();
  int tries = 0;
  for (;;) {
    ++tries;
    absl::StatusOr<std::vector<std::string>> ids;
    if (absl::Status s = p.conn ? absl::OkStatus() : p.Connect(); s.ok()) {
      ids = p.options.topic.empty()
                ? store::EnqueueBatch(*p.conn, p.options.group, items, options)
                : store::PublishBatch(*p.conn, p.options.topic, items, options);
    } else {
      ids = s;
    }
    // UNKNOWN: lost during COMMIT.
    if (absl::IsUnknown(ids.status())) in_doubt = true;
    const absl::Status why = ids.status();
    if (ids.ok()) {
      ++p.batch;
      p.pending.clear();
      if (tries > 1 && p.options.logger) {
        p.options.logger->info(
            "enqueue of a batch of {} item(s) into {} got through after "
            "{} tries{}",
            items.size(), p.target, tries,
            in_doubt ? "; the batch's commit had been in doubt, and it was "
                       "added once"
                     : "");
      }
      return ids;
    }
    if (in_doubt) p.pending = fingerprint;  // whatever this call returns
    if (!store::EnqueueWorthRetrying(why)) {
      // A topic's refusal names its grant itself (require_grant).
      return p.options.topic.empty()
                 ? internal::WithGrantHint(why, p.options.dsn, "producer",
                                           p.options.group)
                 : why;
    }
    if (absl::IsUnavailable(why) || absl::IsUnknown(why)) p.conn.reset();
    const absl::Duration pause =
        Backoff(tries, absl::Milliseconds(100), absl::Seconds(2));
    if (absl::Now() + pause > deadline) {
      if (in_doubt) {  // the same items again settle it
        return absl::UnknownError(absl::StrCat(
            "could not learn within ",
            absl::FormatDuration(p.options.retry_for), " (", tries,
            " tries) whether a batch of ", items.size(),
            " item(s) was enqueued into ", p.target,
            ": a commit's outcome was lost with the connection, and the "
            "database could not be asked since (last: ",
            why.message(),
            "). The batch may be enqueued: call Enqueue again with the same "
            "items, which adds them only if they are not there"));
      }
      return absl::UnavailableError(absl::StrCat(
          "could not enqueue a batch of ", items.size(), " item(s) into ",
          p.target, " within ", absl::FormatDuration(p.options.retry_for), " (",
          tries, " tries; last: ", why.message(),
          "). Nothing of the batch was enqueued; check that the database is "
          "running and reachable, then try again"));
    }
    if (tries == 1 && p.options.logger) {
      p.options.logger->warn(
          "enqueue into {} failed ({}); retrying for up to {}, without "
          "duplicating the batch",
          p.target, std::string(why.message()),
          absl::FormatDuration(p.options.retry_for));
    }
    ++p.retries;
    absl::SleepFor(pause);
  }
}

absl::StatusOr<std::vector<std::string>> Producer::EnqueueIn(
    pqxx::work& tx, const std::string& group, const std::vector<NewItem>& items,
    bool notify, size_t max_payload_bytes) {
  return EnqueueIn(
      tx, group, items,
      EnqueueOptions{.notify = notify, .max_payload_bytes = max_payload_bytes});
}

absl::StatusOr<std::vector<std::string>> Producer::EnqueueIn(
    pqxx::work& tx, const std::string& group, const std::vector<NewItem>& items,
    const EnqueueOptions& options) {
  return store::EnqueueIn(tx, group, items, options);
}

absl::StatusOr<std::vector<std::string>> Producer::PublishIn(
    pqxx::work& tx, const std::string& topic, const std::vector<NewItem>& items,
    const EnqueueOptions& options) {
  return store::PublishIn(tx, topic, items, options);
}

}  // namespace sqlgroup
