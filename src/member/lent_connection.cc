#include "member/lent_connection.h"

#include <algorithm>

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
          absl::Condition(
              +[](bool* borrowed) { return !*borrowed; }, &borrowed_),
          deadline)) {
    return std::nullopt;
  }
  wanted_ = false;
  lent_ = false;
  const bool ok = !broken_;
  broken_ = false;
  return ok;
}

bool LentConnection::BorrowerLentSlot() const {
  absl::MutexLock lock(&mu_);
  return borrowed_ && borrower_slot_;
}

bool LentConnection::Abandon(
    const std::function<std::shared_ptr<void>()>& orphan) {
  absl::MutexLock lock(&mu_);
  if (!borrowed_ || !borrower_slot_) return false;
  orphans_.push_back({conn_, orphan(), std::move(session_)});
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

pqxx::connection* LentConnection::Borrow(absl::Duration wait, bool with_slot,
                                         Session** session) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(this, &LentConnection::Free),
                            wait)) {
    return nullptr;
  }
  borrowed_ = true;
  borrower_slot_ = with_slot;
  ++borrows_;
  *session = session_.get();
  return conn_;
}

bool LentConnection::Return(pqxx::connection* conn, bool broken,
                            bool notified) {
  Orphan orphan{nullptr, nullptr, nullptr};
  {
    absl::MutexLock lock(&mu_);
    auto it = std::find_if(orphans_.begin(), orphans_.end(),
                           [&](const Orphan& o) { return o.conn == conn; });
    if (it != orphans_.end()) {
      orphan = std::move(*it);
      orphans_.erase(it);
    } else {
      borrowed_ = false;
      borrower_slot_ = false;
      if (broken) {
        broken_ = true;
        lent_ = false;  // nobody else may use it until the control sees it
      }
    }
  }
  // Abandoned: it closes here, on the borrower's thread, outside the lock
  // (`orphan` goes out of scope); the control thread has another.
  if (orphan.owner) return true;
  if (broken || notified) returned_.Signal();
  return false;
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
