// A member's control connection, lent to its workers while the control
// thread waits. A worker that cannot have a connection of its own (the
// member's budget is spent, or the server refuses new connections) runs
// its task on this one instead, between the control thread's rounds, so a
// member that holds a single connection still makes progress (issue 22).
//
// The control thread comes first: a worker borrows only while the control
// thread has lent the connection and no other worker has it, gives it back
// after each task, and cuts a batch short when the control thread waits
// for it (Wanted). A libpqxx connection is used by one thread at a time;
// this hands it over with a mutex, so uses never overlap.
//
// Thread safety: all methods from any thread; the connection itself only
// by its holder (the control thread between Hold and Lend, a worker
// between Borrow and Return).
#ifndef SQLGROUP_MEMBER_LENT_CONNECTION_H_
#define SQLGROUP_MEMBER_LENT_CONNECTION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <pqxx/connection>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "store/connection.h"
#include "wakeup.h"

namespace sqlgroup {

class LentConnection {
 public:
  // What a holder knows of the connection's session: the limits in effect
  // (the control thread's and a worker's differ) and the schema version the
  // workers' statements were prepared for on it (0: not prepared), and
  // whether they were run once.
  struct Session {
    store::ConnectionTimeouts timeouts;
    int item_statements = 0;
    bool warm = false;  // run once (PartWorker::WarmUp)
  };

  // Control thread. `conn` (null: none) is the control connection from
  // now on, opened with `options`; the control thread holds it.
  void Set(pqxx::connection* conn, const store::ConnectOptions& options);
  // Takes the connection back, waiting for a borrower's task to end.
  // False when a borrower found it broken: the control thread drops it.
  // nullopt when the borrower still has it at `deadline`: it is still
  // wanted (nobody else may borrow it); call Hold again, or Abandon.
  std::optional<bool> Hold(absl::Time deadline = absl::InfiniteFuture());
  // Whether the borrower lent a slot of the budget with the connection
  // (Borrow's `with_slot`): only such a connection can be abandoned.
  bool BorrowerLentSlot() const;
  // After Hold timed out: leaves the connection to its borrower, who
  // destroys the object `orphan()` returns (which owns the connection and
  // what hangs on it; called under the lock, on this thread) when it gives
  // the connection back; the control thread goes on with another (Set),
  // on the slot the borrower lent, which is the control thread's from now
  // on. False, and nothing done, when the connection was given back
  // meanwhile or its borrower lent no slot.
  bool Abandon(const std::function<std::shared_ptr<void>()>& orphan);
  // Lets workers borrow it until the next Hold().
  void Lend();
  // Readable after a worker gave the connection back broken or with
  // NOTIFYs dispatched. ClearReturned() before polling.
  int returned_fd() const { return returned_.fd(); }
  void ClearReturned() { returned_.Clear(); }

  // Workers. The connection for one task, or null when it is not lent
  // within `wait`; with what is known of its session in `*session`, which
  // the borrower may use until it gives the connection back.
  // `with_slot`: the borrower holds a slot of the budget, which the
  // control thread may take should it abandon the connection.
  pqxx::connection* Borrow(absl::Duration wait, bool with_slot,
                           Session** session);
  // Gives `conn` back; `broken`: a statement found it broken. `notified`:
  // the borrower dispatched NOTIFYs its statements read (which the control
  // thread, polling the socket, could not see): wakes the control thread.
  // True when it had been abandoned (it is closed now, and the borrower's
  // slot is the control thread's).
  bool Return(pqxx::connection* conn, bool broken, bool notified);
  // Whether the control thread waits to take the connection back.
  bool Wanted() const;
  // Whether a worker has it now, and how many times it was borrowed.
  bool Borrowed() const;
  uint64_t borrows() const;

  // The control thread's view of the connection's session.
  Session& session() { return *session_; }

 private:
  bool Free() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return lent_ && !borrowed_ && !wanted_;
  }

  mutable absl::Mutex mu_;
  pqxx::connection* conn_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool lent_ ABSL_GUARDED_BY(mu_) = false;
  bool borrowed_ ABSL_GUARDED_BY(mu_) = false;
  bool borrower_slot_ ABSL_GUARDED_BY(mu_) = false;
  bool wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t borrows_ ABSL_GUARDED_BY(mu_) = 0;
  // Abandoned connections, each its borrower's until it gives it back,
  // with the session it was using (its address stays valid meanwhile).
  struct Orphan {
    pqxx::connection* conn;
    std::shared_ptr<void> owner;
    std::unique_ptr<Session> session;
  };
  std::vector<Orphan> orphans_ ABSL_GUARDED_BY(mu_);
  // Replaced only under mu_ and while nobody borrows the connection.
  std::unique_ptr<Session> session_ = std::make_unique<Session>();
  Wakeup returned_;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_LENT_CONNECTION_H_
