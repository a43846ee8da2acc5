// What an operator sees and does to a group's items (Admin::ListDead and
// the rest; `sqlgroup dead|items|group pause`): dead letters listed, shown,
// requeued and purged; waiting items listed and shown; a group or a key
// paused and resumed. Each operation is one transaction through a SQL
// function of the sqlgroup schema (schema 17, sql/017_operate_items.sql),
// which an operator may also call in a transaction of their own.
// docs/OPERATIONS.md has the reference.
#ifndef SQLGROUP_OPERATIONS_H_
#define SQLGROUP_OPERATIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace sqlgroup {

// A dead letter (sqlgroup.dead_items).
struct DeadItem {
  std::string id;
  std::optional<std::string> key;  // nullopt: an unkeyed item
  int attempts = 0;
  absl::Time enqueued_at;
  absl::Time died_at;
  std::string last_error;  // as the member recorded it; may be empty
  // A keyed item: how many later items of its key wait now (a requeue at
  // its original place goes ahead of them). nullopt for an unkeyed item,
  // and from ShowDead.
  std::optional<int64_t> waiting_after;
  // The payload: in full from ShowDead, empty from ListDead.
  std::string payload;
};

// Which dead letters ListDead returns. Empty fields match all.
struct DeadFilter {
  std::optional<std::string> key;
  std::string error;                // the last error contains this text
  std::optional<absl::Time> since;  // died at or after
  int limit = 100;                  // at most this many, oldest death first
};

// Which dead letters a requeue or a purge takes: exactly one of these
// (INVALID_ARGUMENT otherwise). Ids given must all exist (NOT_FOUND names
// those that do not, and nothing changes).
struct DeadSelection {
  std::vector<std::string> ids;
  std::optional<std::string> key;
  std::string error;                         // requeue only
  std::optional<absl::Duration> older_than;  // purge only: died before
  bool all = false;
};

// Where a requeued item goes in its key.
enum class RequeuePosition {
  // Back at its old place, with its own id: its key's head again, ahead of
  // the key's later items still waiting. The default.
  kOriginal,
  // A new id after its key's last item, as if enqueued now: the key's
  // items waiting now go first.
  kTail,
};
// "original" or "tail", as the CLI and the SQL function take it.
const char* RequeuePositionName(RequeuePosition position);

struct RequeuedItem {
  std::string id;      // as it was dead
  std::string new_id;  // as it waits now (the same id for kOriginal)
  std::optional<std::string> key;
};

// A waiting item (sqlgroup.items): not acknowledged and not dead.
struct WaitingItem {
  std::string id;
  std::optional<std::string> key;
  int part = 0;       // of the group's part count now
  int attempts = 0;   // deliveries that ended without an ack
  absl::Time due_at;  // not handed out before (a delay or a retry's backoff)
  absl::Time enqueued_at;
  int64_t payload_bytes = 0;
  // ListItems: the first 64 bytes; ShowItem: the whole payload.
  std::string payload;
  std::string last_error;  // of its last failed attempt; empty if none
  // When it came back from the dead letters at its old place in its key
  // (a keyed item); nullopt otherwise.
  std::optional<absl::Time> requeued_at;
};

// Which waiting items ListItems returns, in key order.
struct ItemFilter {
  std::optional<std::string> key;
  std::optional<int> part;  // of the group's part count
  int limit = 100;
};

// Which waiting items CancelItems removes: exactly one of ids (all must be
// waiting) or a key (all its waiting items).
struct ItemSelection {
  std::vector<std::string> ids;
  std::optional<std::string> key;
};

// A waiting item cancelled: moved to the dead letters with the last error
// "cancelled by ROLE".
struct CancelledItem {
  std::string id;
  std::optional<std::string> key;
  int part = 0;      // of the group's part count now
  int attempts = 0;  // deliveries that ended without an ack before
  // It was due, a running member owned its part and it headed its key: it
  // may have been with a handler. Its acknowledgement is then refused (the
  // handler's writes in the acknowledging transaction roll back), but an
  // exec or http handler's outside effect may still happen.
  bool may_be_running = false;
};

// A paused group or key of a group.
struct Pause {
  std::optional<std::string> key;  // nullopt: the whole group
  absl::Time paused_at;
  std::string paused_by;  // the database role that paused it
};

}  // namespace sqlgroup

#endif  // SQLGROUP_OPERATIONS_H_
