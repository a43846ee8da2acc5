#include "member/lent_connection.h"

namespace sqlgroup {

void LentConnection::Set(pqxx::connection* conn,
                         const store::ConnectOptions& options) {
  absl::MutexLock lock(&mu_);
  conn_ = conn;
  lent_ = false;
  broken_ = false;
  session_ = Session{store::ConnectionTimeouts(options), false, false};
}

std::optional<bool> LentConnection::Hold(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  wanted_ = true;
  if (!mu_.AwaitWithDeadline(
          absl::Condition(+[](bool* borrowed) { return !*borrowed; },
                          &borrowed_),
          deadline)) {
    return std::nullopt;
  }
  wanted_ = false;
  lent_ = false;
  const bool ok = !broken_;
  broken_ = false;
  return ok;
}

void LentConnection::Lend() {
  absl::MutexLock lock(&mu_);
  lent_ = conn_ != nullptr;
}

pqxx::connection* LentConnection::Borrow(absl::Duration wait) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(this, &LentConnection::Free),
                            wait)) {
    return nullptr;
  }
  borrowed_ = true;
  ++borrows_;
  return conn_;
}

void LentConnection::Return(bool broken, bool notified) {
  {
    absl::MutexLock lock(&mu_);
    borrowed_ = false;
    if (broken) {
      broken_ = true;
      lent_ = false;  // nobody else may use it until the control sees it
    }
  }
  if (broken || notified) returned_.Signal();
}

bool LentConnection::Borrowed() const {
  absl::MutexLock lock(&mu_);
  return borrowed_;
}

uint64_t LentConnection::borrows() const {
  absl::MutexLock lock(&mu_);
  return borrows_;
}

bool LentConnection::Wanted() const {
  absl::MutexLock lock(&mu_);
  return wanted_;
}

}  // namespace sqlgroup
