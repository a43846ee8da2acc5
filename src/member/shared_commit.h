// Acknowledgements that share a commit (group commit, as PostgreSQL's own
// WAL flush and River's completer do it): a worker whose handler wrote
// nothing in the acknowledging transaction hands its items' ack here. With
// fewer than `max_in_flight` statements in flight (one, by default), the
// ack runs at once: an idle member adds no delay. With that many in
// flight, the acks of the member's other workers gather, and the first
// worker to find a line free runs them all as one fenced statement on its
// own connection (it leads; the others wait for its result). Each worker
// waits until the commit that holds its items has ended, so everything
// after an ack (a key's next item, the breaker, the scheduler) sees it
// committed, exactly as with an ack of its own.
//
// Bounded: at most kMaxItems items per statement, taken oldest first; an
// ack waits for the statements in flight and then for its own (behind
// more than kMaxItems items, for as many statements as hold those). A
// crash loses only the acks of the statements in flight: those items come
// back as redeliveries.
//
// Thread safety: Ack() from any number of threads.
#ifndef SQLGROUP_MEMBER_SHARED_COMMIT_H_
#define SQLGROUP_MEMBER_SHARED_COMMIT_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "store/item_acks.h"

namespace sqlgroup {

class SharedCommit {
 public:
  static constexpr size_t kMaxItems = 256;
  // The fewest workers of a member for which its acks share commits.
  static constexpr int kSharedCommitWorkers = 4;

  // `max_in_flight`: statements that may run at once (at least 1).
  explicit SharedCommit(int max_in_flight = 1)
      : max_in_flight_(max_in_flight < 1 ? 1 : max_in_flight) {}

  // Runs one shared ack on the leading worker's connection: the fenced
  // delete of `items` (store::ItemAcks::DeleteOfTakes), returning whether
  // it deleted each (by place), or its error. Must not throw.
  using Run = std::function<absl::StatusOr<std::vector<bool>>(
      const std::vector<store::TakeItem>& items)>;

  struct Result {
    // The statement's error (store/item_acks.h codes), for every ack it
    // held; OK: `deleted` says how many of this ack's items it deleted.
    absl::Status status;
    int64_t deleted = 0;
    // OK: whether it deleted each of this ack's items, by place.
    std::vector<bool> each;
    // This worker ran the statement, on its own connection: an error of
    // the connection is its own. Otherwise another worker's connection
    // broke, and this one's is fine.
    bool led = false;
  };

  // Acknowledges `items` (one handler call's) in the next commit: runs it,
  // leading, with `run`, or waits for the worker that does.
  Result Ack(std::vector<store::TakeItem> items, const Run& run);

  // Statements run, and items acknowledged through them, so far; acks
  // waiting for a statement now.
  int64_t commits() const;
  int64_t items() const;
  size_t waiting() const;

 private:
  struct Pending {
    std::vector<store::TakeItem> items;
    bool taken = false;  // in a statement
    bool done = false;
    Result result;
  };
  // `leader` runs one statement over the oldest pending acks, up to
  // kMaxItems items (FIFO: its own ack's turn comes). Called with mu_ held
  // and a line free; releases it while the statement runs.
  void Lead(const Pending* leader, const Run& run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_in_flight_;
  mutable absl::Mutex mu_;
  std::deque<Pending*> queue_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // statements running
  absl::CondVar ended_;                     // a statement ended
  int64_t commits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t items_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_SHARED_COMMIT_H_
