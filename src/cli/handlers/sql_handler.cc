#include "cli/handlers/sql_handler.h"

#include <unistd.h>

#include <atomic>
#include <pqxx/pqxx>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cli/handlers/per_thread.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/function_ack.h"
#include "store/statements.h"

namespace sqlgroup::cli {
namespace {

// The statement's name on each worker connection.
constexpr char kPreparedName[] = "sqlgroup_cli_handler";
constexpr size_t kMaxConnectionsRemembered = 256;

std::string PrepareSql(const SqlHandler& h, const std::string& name) {
  return absl::StrCat(
      "PREPARE ", name,
      h.batch ? "(text[], bytea[], uuid[])" : "(text, bytea, uuid)", " AS ",
      h.statement);
}

// An error the statement raised: the item's verdict, or (one that says
// nothing of the item) rethrown for the library to treat as a conflict.
absl::Status StatementFailed(const pqxx::sql_error& e) {
  if (store::SaysNothingOfTheItem(store::SqlStateOf(e))) throw;
  return store::SqlErrorVerdict(e, "the handler's statement");
}

std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string SqlStatementOf(const std::string& text) {
  if (store::IsFunctionName(text)) {
    return absl::StrCat("SELECT ", text, "($1, $2, $3)");
  }
  return text;
}

absl::Status CheckSqlHandler(const std::string& dsn,
                             const SqlHandler& handler) {
  const std::string flag =
      absl::StrCat("--handler=", handler.given.empty()
                                     ? absl::StrCat("sql:", handler.statement)
                                     : handler.given);
  auto conn = store::Connect(dsn, {});
  if (!conn.ok()) return conn.status();
  // A name of its own: through a pooler in transaction mode the server
  // connection, and a statement a failed check left on it, are shared.
  const std::string check =
      absl::StrCat("sqlgroup_handler_check_", getpid(), "_",
                   absl::ToUnixMicros(absl::Now()) % 1000000000);
  try {
    pqxx::work tx(**conn);
    // exec_params: the extended protocol, which refuses a second
    // statement after a ';' instead of running it.
    tx.exec_params(PrepareSql(handler, check));
    // PREPARE takes parameters beyond the declared ones when it can infer
    // their types; the handler passes three.
    const int n = tx.exec_params1(
                        "SELECT cardinality(parameter_types) FROM "
                        "pg_prepared_statements WHERE name = $1",
                        check)[0]
                      .as<int>();
    if (n > 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, ": the statement uses $", n,
          ", but the handler passes only $1 key (text), $2 payload (bytea) "
          "and $3 id (uuid)"));
    }
    // PREPARE checks names and some privileges; planning checks the rest
    // (a function's EXECUTE, say). Nothing runs.
    tx.exec(absl::StrCat("EXPLAIN EXECUTE ", check, "(NULL, NULL, NULL)"));
    tx.exec(absl::StrCat("DEALLOCATE ", check));
    tx.commit();
  } catch (const pqxx::broken_connection&) {
    return absl::UnavailableError(
        "lost the connection while checking the handler's statement; check "
        "that the database is up and try again");
  } catch (const pqxx::insufficient_privilege& e) {
    // (libpqxx 6.4 leaves this class's SQLSTATE empty: caught by type.)
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": the member's role may not run the statement: ",
        store::PrimaryMessage(e),
        ". Grant it what the statement needs (USAGE on the schema, the "
        "table privileges, EXECUTE on the function) or make the function "
        "SECURITY DEFINER; see docs/HANDLERS.md"));
  } catch (const pqxx::sql_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag,
        ": the database refused the statement: ", store::PrimaryMessage(e),
        ". It runs with $1 key (text), $2 payload (bytea), $3 id (uuid)",
        handler.batch ? ", as arrays of those (--batch)" : "",
        "; cast from those where it needs another type (e.g. "
        "convert_from($2, 'UTF8')::jsonb), or give a function's name "
        "(sql:schema.function) to call it with the three"));
  }
  return absl::OkStatus();
}

namespace {

// Where a worker thread's connection stands with the statement.
struct Prepared {
  // Part of the name: workers of a member share its control connection
  // when they borrow it, and each prepares the statement there itself.
  int thread = 0;
  int generation = 0;  // the name's suffix: a new name after a failure
  // The connections it was prepared on under `generation` (by client
  // object and backend pid together: a reconnect is a new one, and a
  // reused pid alone, after a server restart say, is not the same): a
  // worker moves between its own connection and the control connection it
  // borrows.
  std::set<std::pair<const void*, int>> prepared_on;
  // Through a pooler: the name on server connections, for `generation`.
  std::string server_name;
  int named_generation = -1;
};

// Runs the statement on the transaction's connection, preparing it first
// when this connection (see Prepared::prepared_on) has not
// got it yet. Prepared statements outlive a rollback. After any error the
// statement is prepared again under a new name on the next try, so one
// that no longer works (its result type changed under an ALTER: 0A000;
// gone: 26000) costs each worker one failed attempt, not the queue.
struct PreparedStatement {
  SqlHandler handler;
  PerThread<Prepared> per_thread;

  void Execute(pqxx::work& tx, const std::string& key,
               const std::string& payload, const std::string& id) {
    Prepared* p = per_thread.Get();
    if (p == nullptr) {
      static std::atomic<int> threads{0};
      per_thread.Set(std::make_unique<Prepared>());
      p = per_thread.Get();
      p->thread = threads++;
    }
    if (store::PooledState* pooled = store::PooledStateOf(tx.conn())) {
      ExecutePooled(tx, *pooled, *p, key, payload, id);
      return;
    }
    const std::pair<const void*, int> on{&tx.conn(), tx.conn().backendpid()};
    // Closed connections pile up (a worker's connection closes after each
    // quiet spell): a fresh name starts a fresh set now and then.
    if (p->prepared_on.size() >= kMaxConnectionsRemembered) {
      ++p->generation;
      p->prepared_on.clear();
    }
    const std::string name =
        absl::StrCat(kPreparedName, "_", p->thread, "_", p->generation);
    try {
      if (p->prepared_on.count(on) == 0) {
        tx.exec_params(PrepareSql(handler, name));  // one statement only
        p->prepared_on.insert(on);
      }
      tx.exec(absl::StrCat("EXECUTE ", name, "(", key, ", ", payload, ", ", id,
                           ")"));
    } catch (const pqxx::sql_error&) {
      // Prepared again, under a new name, before the next try: whatever
      // failed (libpqxx 6.4 leaves the SQLSTATE of some classes empty, so
      // 0A000 cannot be told apart), a fresh statement costs one PREPARE.
      ++p->generation;
      p->prepared_on.clear();
      throw;
    }
  }

  // Through a pooler in transaction mode each transaction may run on
  // another server connection, shared with other clients: the statement
  // goes through the store's statements (store/statements.h), prepared on
  // a server connection the first time it runs there, under a name that
  // holds a hash of its text. The acknowledging transaction listed its
  // server connection's statements when it began: no lookup per item.
  void ExecutePooled(pqxx::work& tx, store::PooledState& state, Prepared& p,
                     const std::string& key, const std::string& payload,
                     const std::string& id) {
    if (p.named_generation != p.generation) {
      p.server_name =
          store::NameOnServer(absl::StrCat(kPreparedName, "_", p.generation),
                              PrepareSql(handler, kPreparedName));
      p.named_generation = p.generation;
    }
    if (!store::CanPrepare(tx, state)) store::LocalLimits(tx);
    const bool there = state.on_server.count(p.server_name) > 0;
    try {
      store::ExecPooled(tx, state, p.server_name,
                        PrepareSql(handler, p.server_name),
                        absl::StrCat("EXECUTE ", p.server_name, "(", key, ", ",
                                     payload, ", ", id, ")"));
    } catch (const pqxx::feature_not_supported&) {
      // 0A000: the statement no longer works as prepared (a result type
      // changed under an ALTER): a fresh name on the next try.
      ++p.generation;
      throw;
    } catch (const pqxx::sql_error&) {
      // Only a PREPARE that failed takes a fresh name: statements on
      // shared server connections are never deallocated, so a name per
      // failure (a dead-letter raise, a conflict) would pile up.
      if (!there) ++p.generation;
      throw;
    }
  }
};

}  // namespace

Handler MakeSqlHandler(const SqlHandler& handler) {
  auto statement = std::make_shared<PreparedStatement>();
  statement->handler = handler;
  return [statement](const Item& item, AckTransaction& ack) -> absl::Status {
    try {
      pqxx::work& tx = ack.work();
      statement->Execute(
          tx, item.key ? tx.quote(*item.key) + "::text" : "NULL::text",
          tx.quote_raw(item.payload), tx.quote(item.id) + "::uuid");
    } catch (const pqxx::sql_error& e) {
      return StatementFailed(e);
    }
    return absl::OkStatus();
  };
}

BatchHandler MakeSqlBatchHandler(const SqlHandler& handler) {
  auto statement = std::make_shared<PreparedStatement>();
  statement->handler = handler;
  return [statement](const std::vector<Item>& items,
                     AckTransaction& ack) -> absl::Status {
    try {
      pqxx::work& tx = ack.work();
      statement->Execute(tx, tx.quote(TextArrayLiteral(items)) + "::text[]",
                         tx.quote(ByteaArrayLiteral(items)) + "::bytea[]",
                         tx.quote(UuidArrayLiteral(items)) + "::uuid[]");
    } catch (const pqxx::sql_error& e) {
      return StatementFailed(e);
    }
    return absl::OkStatus();
  };
}

std::string TextArrayLiteral(const std::vector<Item>& items) {
  std::vector<std::string> parts;
  for (const Item& item : items) {
    parts.push_back(item.key ? Quoted(*item.key) : "NULL");
  }
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

std::string ByteaArrayLiteral(const std::vector<Item>& items) {
  std::vector<std::string> parts;
  for (const Item& item : items) {
    parts.push_back(
        Quoted(absl::StrCat("\\x", absl::BytesToHexString(item.payload))));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

std::string UuidArrayLiteral(const std::vector<Item>& items) {
  std::vector<std::string> parts;
  for (const Item& item : items) parts.push_back(item.id);
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

}  // namespace sqlgroup::cli
