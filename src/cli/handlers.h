// The built-in handlers of `sqlgroup consume --handler`: noop, count,
// record, sleep:DURATION and fail:RATE. Parsing is pure; building needs nothing
// but the spec.
#ifndef SQLGROUP_CLI_HANDLERS_H_
#define SQLGROUP_CLI_HANDLERS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sqlgroup/item.h"

namespace sqlgroup::cli {

struct HandlerSpec {
  enum class Kind { kNoop, kCount, kRecord, kSleep, kFail };
  Kind kind = Kind::kNoop;
  absl::Duration sleep;    // kSleep; kCount and kRecord hold the ack open
  double fail_rate = 0.0;  // kFail, in [0, 1]
};

// INVALID_ARGUMENT naming the accepted forms.
absl::StatusOr<HandlerSpec> ParseHandlerSpec(const std::string& text);

// `count` adds 1 to sqlgroup_demo.counters(key) for the item's key in the
// acknowledging transaction: the exactly-once checker of the demo and the
// tests (counters must end at what was produced per key). When the payload
// is numbered (numbered_items.h) it also proves per-key order: the row's
// order_violations grows by 1 for an item whose number is not the key's
// last_seq + 1 (a step back, a repeat or a gap; a dead-lettered item shows
// as a gap), and last_seq becomes the item's number. `record` writes one
// row per item into sqlgroup_demo.results (no unique constraint, so a
// double acknowledgement shows), with its payload, the claim it was
// acknowledged under and the database time: the chaos suite's evidence.
Handler MakeHandler(const HandlerSpec& spec);

// INVALID_ARGUMENT naming --fail_rate unless 0 <= rate <= 1.
absl::Status CheckFailRate(double rate);

// `handler`, failing each delivery with probability `rate` before it runs
// (so before it writes anything): for demos and tests of the retry path.
// The failure's message says it was injected. rate <= 0: `handler` itself.
Handler WithInjectedFailures(Handler handler, double rate);

// Creates sqlgroup_demo.counters, .produced and .results if missing, and
// adds the columns newer versions use to tables made by older ones; members
// starting together race on this, so it retries a duplicate-name error.
absl::Status EnsureDemoTables(const std::string& dsn);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_HANDLERS_H_
