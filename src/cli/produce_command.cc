// `sqlgroup produce`: enqueue N items, optionally keyed (and then numbered
// per key, see numbered_items.h) and paced.
#include <cstdio>
#include <pqxx/pqxx>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cli/flags.h"
#include "cli/handlers/handler_spec.h"
#include "cli/numbered_items.h"
#include "cli/subcommands.h"
#include "dsn.h"
#include "sqlgroup/producer.h"
#include "status_macros.h"
#include "store/connection.h"

namespace sqlgroup::cli {

absl::Status RunProduce(const Args&) {
  RETURN_IF_ERROR(RequireGroupFlag());
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
  const std::string group = absl::GetFlag(FLAGS_group);
  const std::string dsn = ResolveDsn(absl::GetFlag(FLAGS_dsn));
  // Producer::Create checks the schema and the group; batches then go
  // through EnqueueIn so the per-key tally (and with it each keyed item's
  // number) commits with the items.
  ASSIGN_OR_RETURN(auto checked,
                   Producer::Create({.dsn = dsn, .group = group}));
  checked.reset();
  ASSIGN_OR_RETURN(auto conn, store::Connect(dsn, {}));
  if (keys > 0) RETURN_IF_ERROR(EnsureDemoTables(dsn));
  // Paced: a batch every 50 ms; unpaced: batches of 500.
  const int64_t batch =
      rate > 0 ? std::max<int64_t>(1, static_cast<int64_t>(rate / 20)) : 500;
  NewItem unkeyed;
  unkeyed.payload = std::string(payload_bytes, 'x');
  const absl::Time start = absl::Now();
  int64_t sent = 0;
  while (sent < count) {
    const int64_t n = std::min(batch, count - sent);
    try {
      pqxx::work tx(*conn);
      absl::StatusOr<std::vector<std::string>> ids;
      if (keys > 0) {
        std::vector<std::string> item_keys(n);
        for (int64_t i = 0; i < n; ++i) {
          item_keys[i] = absl::StrCat("k", (sent + i) % keys);
        }
        ids = EnqueueNumbered(tx, group, item_keys, payload_bytes);
      } else {
        ids = Producer::EnqueueIn(tx, group, std::vector<NewItem>(n, unkeyed));
      }
      if (!ids.ok()) return ids.status();
      tx.commit();
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("enqueue failed after ", sent, " items: ", e.what()));
    }
    sent += n;
    if (rate > 0) {
      const absl::Time due = start + absl::Seconds(sent / rate);
      absl::SleepFor(due - absl::Now());
    }
  }
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("produced %lld items into %s in %.2f s (%.0f/s)\n",
              static_cast<long long>(sent), group.c_str(), secs,
              secs > 0 ? sent / secs : 0.0);
  return absl::OkStatus();
}

}  // namespace sqlgroup::cli
