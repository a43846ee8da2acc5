// `--handler sql:STATEMENT` (or sql:FUNCTION): a SQL statement run inside
// the acknowledging transaction, so its effects commit with the fenced
// delete of the item or not at all: exactly once.
//
//   sql:'SELECT app.pay_order($1, $2, $3)'    $1 key (text, NULL when the
//   sql:app.pay_order                         item has none), $2 payload
//                                             (bytea), $3 id (uuid)
//
// With --batch the same statement gets arrays (text[], bytea[], uuid[]),
// one element per item of the batch, in key order. A statement may use
// any of the three parameters, or none. It is prepared once per worker
// connection with those parameter types (PREPARE, so its plan is made
// once) and run with the item's values as literals. An error it raises
// fails the attempt
// (retried after the backoff, dead-lettered after --max_attempts with the
// database's message); an error raised with SQLSTATE 'SGDLQ'
// (RAISE EXCEPTION '...' USING ERRCODE = 'SGDLQ') dead-letters the item at
// once.
#ifndef SQLGROUP_CLI_HANDLERS_SQL_HANDLER_H_
#define SQLGROUP_CLI_HANDLERS_SQL_HANDLER_H_

#include <string>

#include "absl/status/statusor.h"
#include "sqlgroup/item.h"

namespace sqlgroup::cli {

struct SqlHandler {
  std::string statement;
  bool batch = false;
  std::string given;  // the --handler value as typed, for messages
};

// The statement for `text` after "sql:": a function name (schema.name)
// becomes SELECT name($1, $2, $3); anything else is the statement itself.
std::string SqlStatementOf(const std::string& text);

// Checks `handler.statement` on the database (prepared, not run: nothing
// changes). INVALID_ARGUMENT, with the database's reason and the types the
// handler passes, for a statement that does not parse, names something
// that does not exist, uses a parameter beyond $3 or one as a type it
// cannot be; UNAVAILABLE if the database cannot be reached.
absl::Status CheckSqlHandler(const std::string& dsn, const SqlHandler& handler);

Handler MakeSqlHandler(const SqlHandler& handler);
BatchHandler MakeSqlBatchHandler(const SqlHandler& handler);

// PostgreSQL array values of the batch's keys (text[], NULL for none),
// payloads (bytea[], hex) and ids (uuid[]), to be quoted as literals.
// Pure; exposed for tests.
std::string TextArrayLiteral(const std::vector<Item>& items);
std::string ByteaArrayLiteral(const std::vector<Item>& items);
std::string UuidArrayLiteral(const std::vector<Item>& items);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_HANDLERS_SQL_HANDLER_H_
