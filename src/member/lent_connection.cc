#include "member/lent_connection.h"

namespace sqlgroup {

void LentConnection::Set(pqxx::connection* conn,
                         const store::ConnectOptions& options) {
  absl::MutexLock lock(&mu_);
  conn_ = conn;
  lent_ = false;
  broken_ = false;
  session_ = std::make_unique<Session>();
  session_->timeouts = store::ConnectionTimeouts(options);
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

bool LentConnection::Abandon(
    const std::function<std::shared_ptr<void>()>& orphan, bool own_slot,
    bool* slot_taken) {
  absl::MutexLock lock(&mu_);
  *slot_taken = false;
  // One orphan at a time: the control thread's next connection is not
  // lent before it holds it, so its borrower cannot be this one.
  if (!borrowed_ || orphan_ || !(own_slot || borrower_slot_)) return false;
  orphan_ = orphan();
  orphan_conn_ = conn_;
  orphan_session_ = std::move(session_);
  orphan_slot_ = borrower_slot_;
  *slot_taken = borrower_slot_;
  // Its borrower is no longer the control thread's concern; nobody else
  // borrows it. The control thread's next Set() lends another.
  conn_ = nullptr;
  borrowed_ = false;
  borrower_slot_ = false;
  lent_ = false;
  wanted_ = false;
  broken_ = false;
  session_ = std::make_unique<Session>();
  return true;
}

void LentConnection::Lend() {
  absl::MutexLock lock(&mu_);
  lent_ = conn_ != nullptr;
}

pqxx::connection* LentConnection::Borrow(absl::Duration wait,
                                         bool with_slot) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(this, &LentConnection::Free),
                            wait)) {
    return nullptr;
  }
  borrowed_ = true;
  borrower_slot_ = with_slot;
  ++borrows_;
  return conn_;
}

bool LentConnection::Return(pqxx::connection* conn, bool broken,
                            bool notified) {
  std::shared_ptr<void> orphan;
  std::unique_ptr<Session> orphan_session;
  bool slot_taken = false;
  {
    absl::MutexLock lock(&mu_);
    if (orphan_ && conn == orphan_conn_) {
      // Abandoned: it closes below, on the borrower's thread and outside
      // the lock; the control thread has another.
      orphan = std::move(orphan_);
      orphan_session = std::move(orphan_session_);
      orphan_conn_ = nullptr;
      slot_taken = orphan_slot_;
      orphan_slot_ = false;
      broken = false;
    } else {
      borrowed_ = false;
      borrower_slot_ = false;
      if (broken) {
        broken_ = true;
        lent_ = false;  // nobody else may use it until the control sees it
      }
    }
  }
  if (broken || notified) returned_.Signal();
  return slot_taken;
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
