// `--handler exec:CMD`: each worker thread runs one long-lived CMD and
// hands it items over a line protocol (docs/HANDLERS.md):
//
//   sqlgroup -> CMD (stdin)    one item per line, as ItemJson
//   CMD -> sqlgroup (stdout)   one verdict per line: "ok", "retry REASON"
//                              or "dead REASON"
//
// ok acknowledges the item; retry fails this attempt (retried after the
// backoff, dead-lettered after --max_attempts); dead dead-letters it at
// once. A CMD that exits, closes its stdout, replies out of protocol or
// not within the timeout fails the attempt and is started again for the
// next item. CMD runs outside the acknowledging transaction: its effects
// are at-least-once.
#ifndef SQLGROUP_CLI_HANDLERS_EXEC_HANDLER_H_
#define SQLGROUP_CLI_HANDLERS_EXEC_HANDLER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "spdlog/logger.h"
#include "sqlgroup/item.h"

namespace sqlgroup::cli {

// The words of CMD, its program found (INVALID_ARGUMENT naming what is
// wrong otherwise): checked before any item is claimed.
absl::StatusOr<std::vector<std::string>> ParseExecCommand(
    const std::string& command);

// Starts `argv` once and checks it is still running after `wait` (1 s
// from consume: it should wait for items on stdin). A command whose script
// is missing or that fails at start is INVALID_ARGUMENT before any item
// is claimed; one that fails only after `wait` is caught per item.
absl::Status CheckExecCommandStarts(const std::vector<std::string>& argv,
                                    const std::string& given,
                                    absl::Duration wait);

// The verdict a reply line stands for (pure; see the protocol above).
absl::Status ExecVerdict(const std::string& reply);

// A handler running `argv`, one process per calling thread; `timeout`
// bounds each reply. Processes are stopped when the last copy of the
// handler is destroyed.
Handler MakeExecHandler(std::vector<std::string> argv, absl::Duration timeout,
                        std::shared_ptr<spdlog::logger> logger);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_HANDLERS_EXEC_HANDLER_H_
