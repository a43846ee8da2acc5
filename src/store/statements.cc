#include "store/statements.h"

#include <array>
#include <memory>
#include <pqxx/pqxx>
#include <unordered_map>

#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "md5.h"

namespace sqlgroup::store {
namespace {

// libpqxx 6's connection has no virtual functions and no room for data of
// ours, but it does hold error handlers, which are polymorphic: a pooled
// connection carries one that does nothing but hold its PooledState. The
// connection detaches its handlers when it closes; the handler objects
// are owned here, by the address of their connection, and freed when
// another connection is opened at that address (then the old one is
// certainly closed), so their number stays within the addresses
// connections have had.
class Mark final : public pqxx::errorhandler {
 public:
  explicit Mark(pqxx::connection_base& conn) : pqxx::errorhandler(conn) {}
  bool operator()(const char[]) noexcept override { return true; }
  PooledState state;
};

struct Marks {
  absl::Mutex mu;
  std::unordered_map<const void*, std::unique_ptr<Mark>> by_conn
      ABSL_GUARDED_BY(mu);
};

Marks& AllMarks() {
  static Marks* const marks = new Marks;  // never destroyed
  return *marks;
}

}  // namespace

PooledState& MarkPooled(pqxx::connection& conn) {
  auto mark = std::make_unique<Mark>(conn);
  PooledState& state = mark->state;
  Marks& marks = AllMarks();
  absl::MutexLock lock(&marks.mu);
  marks.by_conn[&conn] = std::move(mark);  // frees an earlier one's
  return state;
}

void Unmark(pqxx::connection& conn) {
  Marks& marks = AllMarks();
  absl::MutexLock lock(&marks.mu);
  marks.by_conn.erase(&conn);
}

PooledState* PooledStateOf(const pqxx::connection_base& conn) {
  // A direct connection has no handlers: an empty vector, no allocation.
  for (pqxx::errorhandler* h : conn.get_errorhandlers()) {
    if (auto* mark = dynamic_cast<Mark*>(h)) return &mark->state;
  }
  return nullptr;
}

std::string NameOnServer(const std::string& name, const std::string& sql) {
  const std::array<uint8_t, 16> digest = Md5(sql);
  return absl::StrCat(name, "_",
                      absl::BytesToHexString(absl::string_view(
                          reinterpret_cast<const char*>(digest.data()), 6)));
}

const char kListPrepared[] =
    "SELECT coalesce(array_agg(name::text), '{}') FROM "
    "pg_prepared_statements WHERE name LIKE 'sqlgroup\\_%'";

void NoteListed(PooledState& state, const void* tx, const pqxx::result& r) {
  state.listed_tx = tx;
  state.on_server.clear();
  if (r.empty() || r[0][0].is_null()) return;
  std::string text = r[0][0].as<std::string>();  // {a,b,c}
  if (text.size() < 2) return;
  for (absl::string_view name :
       absl::StrSplit(absl::string_view(text).substr(1, text.size() - 2), ',',
                      absl::SkipEmpty())) {
    state.on_server.insert(std::string(name));
  }
}

namespace {

bool Missing(const pqxx::sql_error& e) {
  // 26000; libpqxx 6.4 may leave the class's SQLSTATE empty.
  return dynamic_cast<const pqxx::invalid_sql_statement_name*>(&e) != nullptr ||
         e.sqlstate() == "26000";
}

bool AlreadyThere(const pqxx::sql_error& e) {
  // 42P05; should libpqxx leave it empty, the server's own words.
  return e.sqlstate() == "42P05" ||
         (e.sqlstate().empty() &&
          std::string(e.what()).find("prepared statement") !=
              std::string::npos &&
          std::string(e.what()).find("already exists") != std::string::npos);
}

}  // namespace

pqxx::result ExecPooled(pqxx::transaction_base& tx, PooledState& state,
                        const std::string& server_name,
                        const std::string& prepare, const std::string& call) {
  auto prepare_and_call = [&] { return absl::StrCat(prepare, "; ", call); };
  if (dynamic_cast<pqxx::nontransaction*>(&tx) != nullptr) {
    // Each try may run on another server connection: run it, prepare it
    // where it is missing, run it where another client prepared it first.
    // Under many clients on few server connections the run and the
    // prepare can land on different ones a few times in a row (once in a
    // CI run with 3 tries): only cold server connections take this path,
    // and each try is a round trip.
    for (int i = 0; i < 10; ++i) {
      try {
        return tx.exec(call);
      } catch (const pqxx::sql_error& e) {
        if (!Missing(e)) throw;
      }
      try {
        return tx.exec(prepare_and_call());
      } catch (const pqxx::sql_error& e) {
        if (!AlreadyThere(e)) throw;
      }
    }
    return tx.exec(call);  // one more try; its error is the caller's
  }
  // In a transaction, which keeps its server connection: what that has
  // is known.
  if (state.on_server.count(server_name) > 0) return tx.exec(call);
  pqxx::result r = tx.exec(prepare_and_call());
  state.on_server.insert(server_name);
  return r;
}

bool CanPrepare(pqxx::transaction_base& tx, const PooledState& state) {
  return dynamic_cast<pqxx::nontransaction*>(&tx) != nullptr ||
         state.listed_tx == &tx;
}

void Prepare(pqxx::connection& conn, const std::string& name,
             const std::string& sql) {
  if (PooledState* pooled = PooledStateOf(conn)) {
    const std::string server_name = NameOnServer(name, sql);
    pooled->statements[name] = {
        sql, server_name, absl::StrCat("PREPARE ", server_name, " AS ", sql)};
    return;
  }
  // Again with other text (the schema changed: PrepareItemStatements):
  // pqxx refuses a redefinition, so the old one goes first (a DEALLOCATE
  // once it was used; nothing otherwise).
  conn.unprepare(name);
  conn.prepare(name, sql);
}

}  // namespace sqlgroup::store
