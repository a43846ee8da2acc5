// What `sqlgroup consume --handler` runs: real work (sql:STATEMENT,
// exec:CMD, http(s)://URL; see sql_handler.h, exec_handler.h,
// http_handler.h) or a demo handler (noop, count, record, sleep:DURATION,
// fail:RATE). Parsing checks all it can without a database; BuildHandlers
// checks the rest (a SQL statement) before any item is claimed.
#ifndef SQLGROUP_CLI_HANDLERS_HANDLER_SPEC_H_
#define SQLGROUP_CLI_HANDLERS_HANDLER_SPEC_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/handlers/in_flight_calls.h"
#include "spdlog/logger.h"
#include "sqlgroup/item.h"

namespace sqlgroup::cli {

struct HandlerSpec {
  enum class Kind { kNoop, kCount, kRecord, kSleep, kFail, kSql, kExec, kHttp };
  Kind kind = Kind::kNoop;
  absl::Duration sleep;    // kSleep; kCount and kRecord hold the ack open
  double fail_rate = 0.0;  // kFail, in [0, 1]
  std::string target;      // kSql: the statement; kHttp: the URL
  std::string function;    // kSql given a function's name: the name
  std::string given;       // the spec as typed
  std::vector<std::string> command;  // kExec: the program and its arguments
};

// INVALID_ARGUMENT naming the accepted forms, or what is wrong with a
// command (its program not found) or a URL.
absl::StatusOr<HandlerSpec> ParseHandlerSpec(const std::string& text);

// What consume runs: exactly one of the three is set.
struct Handlers {
  Handler handler;
  BatchHandler batch_handler;
  SqlFunction sql_function;  // sql:FUNCTION, called by the ack's statement
};

struct HandlerContext {
  std::string dsn;     // where a SQL statement is checked
  bool batch = false;  // --batch: one transaction per claimed batch
  absl::Duration timeout = absl::Seconds(30);  // exec and http, per item
  double fail_rate = 0.0;  // --fail_rate, injected before the handler
  // Where exec, http and sleep handler calls register, so that the member
  // can cut them off (ConsumerOptions::cut_off). Optional.
  std::shared_ptr<InFlightCalls> calls;
  std::shared_ptr<spdlog::logger> logger;
  // --handler_headers: a file of headers for an http handler's requests.
  std::string headers_file;
  // The group consumed: `record` stores it with each row (groups that read
  // one topic share item ids).
  std::string group;
};

// Builds the handlers for `spec`. A SQL statement is checked on the
// database first (INVALID_ARGUMENT saying what to change; nothing runs).
// sql:FUNCTION becomes a SqlFunction, which the ack's own statement calls
// (one round trip per item or batch), unless failures are injected
// (--fail_rate, which runs before the handler): then, as sql:STATEMENT, a
// handler that runs it in the acknowledging transaction.
absl::StatusOr<Handlers> BuildHandlers(const HandlerSpec& spec,
                                       const HandlerContext& context);

// `count` adds 1 to sqlgroup_demo.counters(key) for the item's key in the
// acknowledging transaction: the exactly-once checker of the demo and the
// tests (counters must end at what was produced per key). When the payload
// is numbered (numbered_items.h) it also proves per-key order: the row's
// order_violations grows by 1 for an item whose number is not the key's
// last_seq + 1 (a step back, a repeat or a gap; a dead-lettered item shows
// as a gap), and last_seq becomes the item's number. `record` writes one
// row per item into sqlgroup_demo.results (no unique constraint, so a
// double acknowledgement shows), with its payload, the claim it was
// acknowledged under, `group` and the database time: the chaos suite's
// evidence.
Handler MakeHandler(const HandlerSpec& spec, const std::string& group = "");

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

#endif  // SQLGROUP_CLI_HANDLERS_HANDLER_SPEC_H_
