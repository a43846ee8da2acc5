#include "store/statements.h"

#include <memory>
#include <unordered_map>

#include "absl/synchronization/mutex.h"

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

void Prepare(pqxx::connection& conn, const std::string& name,
             const std::string& sql) {
  if (PooledState* pooled = PooledStateOf(conn)) {
    pooled->statements[name] = sql;
    return;
  }
  conn.prepare(name, sql);
}

}  // namespace sqlgroup::store
