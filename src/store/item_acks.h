// The statements that settle a worker's claimed items, as an interface:
// the settler (member/settler.h) decides what happens to an item, these
// write it. PgItemAcks (store/pg_item_acks.h) runs them on PostgreSQL;
// unit tests hand in a fake.
//
// Every error is a status, by what it says of the items:
//   UNAVAILABLE   the connection broke: the outcome is unknown (an item
//                 still there is read again)
//   UNKNOWN       a COMMIT in doubt: the same
//   ABORTED       a conflict (a serialization failure, a deadlock, a lock
//                 timeout, a server that cannot work now): nothing was
//                 written, and nothing is said of the items
//   other codes   the statement failed for a reason of its own (a missing
//                 grant, a broken schema), or, where a method says so, the
//                 handler's verdict
//
// Thread safety: one worker thread, as the connection under it.
#ifndef SQLGROUP_STORE_ITEM_ACKS_H_
#define SQLGROUP_STORE_ITEM_ACKS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "keyspace.h"
#include "sqlgroup/item.h"
#include "store/model.h"

namespace sqlgroup::store {

// The part's next claim, read by the statement that acknowledges (one
// round trip for both) when the handler wrote nothing.
struct CarriedClaim {
  // The next item of the (one) acknowledged item's key (NextOfKey), or a
  // claim of up to `limit` items along [from, last]: with `runs`, the
  // batch handler's under per-key order (ClaimRuns, with `continued` and
  // `pass_over`), else ClaimItems.
  bool of_key = false;
  bool runs = false;
  bool continued = false;
  const std::vector<uint64_t>* pass_over = nullptr;
  Uuid128 from = 0;
  Uuid128 last = 0;
  int limit = 0;
};

// What an ack that carried a claim read.
struct AckedAndClaimed {
  int64_t acked = 0;  // items the fenced delete deleted
  // ABORTED when the take is gone.
  absl::StatusOr<std::vector<Item>> next;
  // ClaimRuns only, as HeadClaim's: the read reached the end of the range,
  // or else goes on at `resume`.
  bool exhausted = false;
  Uuid128 resume = 0;
};

// An item to acknowledge under its take, in an ack shared by several takes
// of the member (DeleteOfTakes).
struct TakeItem {
  std::string id;
  std::string session;
  int part = 0;
  int64_t epoch = 0;
};

// A handler with the items' acknowledging transaction, and its ack.
struct HandledAndAcked {
  // The handler's: OK when it returned OK. Not OK: the transaction rolled
  // back and nothing was acknowledged. An exception it threw is a verdict
  // with its message, except those of `error`.
  absl::Status verdict;
  // The handler returned OK, and the ack ran.
  bool acking = false;
  // How the handler's own statements (UNAVAILABLE, ABORTED) or the ack
  // (any code) failed; OK otherwise.
  absl::Status error;
  // The ack's fenced delete, of `ids`: the transaction committed only if
  // it deleted them all. `alone`: it ran in autocommit (the handler never
  // began the transaction), so what it deleted is acknowledged even when
  // it was not all.
  int64_t deleted = -1;
  bool alone = false;
  absl::Time ack_start;  // when the ack's statement started
  // The claim asked for, read by the ack's statement once it committed.
  std::optional<AckedAndClaimed> carried;
  // `defer_alone`: the handler returned OK without beginning its
  // transaction, and the ack is the caller's to make (DeleteOfTakes).
  bool deferred = false;
};

// The handler of one call (a single item's, or a batch handler's batch).
using HandlerCall = std::function<absl::Status(AckTransaction&)>;

class ItemAcks {
 public:
  virtual ~ItemAcks() = default;

  // Runs `handler` with an AckTransaction on the connection, then, if it
  // returned OK, deletes `ids` fenced on the take `ref`: in the handler's
  // transaction if it began one (committed only when every item was
  // deleted), else alone in autocommit. `carry` asks the ack's statement
  // to read the part's next claim too: any claim when alone, only of_key
  // in a transaction. `defer_alone` (only without `carry`: a carried
  // claim needs a statement of its own): an ack that would run alone is
  // not made but left to the caller (`deferred`).
  virtual HandledAndAcked HandleAndAck(const ClaimRef& ref,
                                       const std::vector<std::string>& ids,
                                       const HandlerCall& handler,
                                       const CarriedClaim* carry,
                                       bool defer_alone) = 0;

  // The fenced delete, in one autocommit statement, of items of several
  // takes of group `group` (each item under its own: deleted if and only
  // if that take still owns its part and its session is alive, as
  // DeleteClaimedNow). Returns whether it deleted each of `items` (by
  // place), each deleted one acknowledged for good. The acks of a member's
  // workers share it (SharedCommit).
  virtual absl::StatusOr<std::vector<bool>> DeleteOfTakes(
      const std::string& group, const std::vector<TakeItem>& items) = 0;

  // The fenced delete of `ids` calling the group's SQL function on those
  // it deletes, in one autocommit statement: on arrays of them (a function
  // on arrays), or on the one item of `ids` (with `carry` of_key: and the
  // read of its key's next item). Returns what it deleted (acknowledged and
  // handled, for good) and read. An error the function raised is its verdict:
  // DEADLINE_EXCEEDED when it was canceled (statement timeout, SQLSTATE
  // 57014), a dead-letter verdict for SQLSTATE SGDLQ, FAILED_PRECONDITION
  // or INTERNAL else (SqlErrorVerdict); the statement wrote nothing then.
  virtual absl::StatusOr<AckedAndClaimed> AckInFunction(
      const ClaimRef& ref, const std::vector<std::string>& ids,
      const CarriedClaim* carry) = 0;

  // The SQL function of single items, its calls grouped into one
  // transaction until CommitCalls (store/grouped_calls.h): each call the
  // fenced delete of the item `id` calling the function, as AckInFunction's,
  // under a savepoint. CallGrouped returns whether it deleted the item;
  // its errors are AckInFunction's (the function's own undo only its
  // call), UNAVAILABLE losing every call of the transaction, CANCELLED
  // (the call not made) when the transaction went with a connection
  // dropped since. CommitCalls: OK once they committed (OK too when none
  // is open); UNAVAILABLE or CANCELLED lost before, UNKNOWN in doubt,
  // another code refused (nothing kept). Any
  // other statement on the connection must wait for CommitCalls: it would
  // run in the transaction. CanGroupCalls: whether the connection allows
  // it (direct, not through a pooler in transaction mode); CallsOpen:
  // whether a transaction is open; ForgetCalls: it went with a connection
  // that was dropped.
  virtual bool CanGroupCalls() = 0;
  virtual absl::StatusOr<bool> CallGrouped(const ClaimRef& ref,
                                           const std::string& id) = 0;
  virtual absl::Status CommitCalls() = 0;
  virtual bool CallsOpen() const = 0;
  virtual void ForgetCalls() = 0;

  // As ReleaseForRetry, DeadLetter and CountDeliveriesOfTheDead in
  // store/item_store.h, and ReportCircuit in store/member_store.h.
  virtual absl::StatusOr<int64_t> ReleaseForRetry(
      const ClaimRef& ref, const std::vector<std::string>& ids,
      const std::string& error, absl::Duration backoff, bool count_attempt) = 0;
  virtual absl::StatusOr<bool> DeadLetter(const ClaimRef& ref,
                                          const std::string& id,
                                          const std::string& error,
                                          bool count_attempt) = 0;
  virtual absl::StatusOr<std::map<std::string, int>> CountDeliveriesOfTheDead(
      const ClaimRef& ref, const std::vector<std::string>& ids,
      absl::Time died_at) = 0;
  virtual absl::Status ReportCircuit(const std::string& session, bool open,
                                     const std::string& error) = 0;
  // As StillDue in store/still_due.h: which of `ids`, claimed a while
  // ago, may still go to a handler.
  virtual absl::StatusOr<std::set<std::string>> StillDue(
      const ClaimRef& ref, const std::vector<std::string>& ids) = 0;
};

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_ITEM_ACKS_H_
