// The acks a worker gathers across the items it handles back to back
// (issue 43): an item whose handler wrote nothing in its acknowledging
// transaction need not pay a commit of its own. Its ack waits here while
// the worker goes straight on to its next item, and the gathered acks
// commit together as one fenced statement (store::ItemAcks::DeleteOfTakes)
// as soon as the worker has no item at hand, or the gathering is Due.
//
// The item keeps its key (and its place in the sweep) until that commit:
// the scheduler hears of it only then, so the key's next item is handed
// out only after its predecessor's ack committed, exactly as with an ack
// of its own. A crash loses the gathered acks: those items come back as
// redeliveries, which the part's next owner counts as attempts.
//
// A SQL function's calls gather the same way (store/grouped_calls.h): each
// call runs at once, in a transaction left open for the calls that
// follow, and the gathered ones commit with one COMMIT.
//
// Bounded: at most kMaxItems acks (sql_calls_per_commit calls), and none
// waits longer than kGatherFor plus the one handler call that began before
// then: under per-key order a worker gathers across items of no key only (a
// keyed item's task goes on with its key's next item), under ordering
// 'none' across the items of one claim, and it commits before any other
// task. A handler call that itself took kGatherFor or longer ends the
// gathering at once: a slow handler's items commit one by one, as before
// (there is little to gain).
//
// Thread safety: one worker thread.
#ifndef SQLGROUP_MEMBER_GATHERED_ACKS_H_
#define SQLGROUP_MEMBER_GATHERED_ACKS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "sqlgroup/item.h"
#include "store/model.h"

namespace sqlgroup {

// `item` without its payload: what a gathered ack, and the task it ends,
// keep of it (its place, key and attempt) without a copy of its bytes.
inline Item WithoutPayload(const Item& item) {
  Item slim;
  slim.id = item.id;
  slim.key = item.key;
  slim.attempt = item.attempt;
  slim.part = item.part;
  slim.session = item.session;
  slim.epoch = item.epoch;
  slim.enqueued_at = item.enqueued_at;
  return slim;
}

class GatheredAcks {
 public:
  static constexpr size_t kMaxItems = 64;
  static constexpr absl::Duration kGatherFor = absl::Milliseconds(5);

  explicit GatheredAcks(size_t max_items = kMaxItems) : max_(max_items) {}

  struct Ack {
    store::ClaimRef ref;
    Item item;  // without its payload
  };

  // The ack of `item` under `ref`, whose handler call took `call`, waits
  // from `now` on.
  void Add(store::ClaimRef ref, const Item& item, absl::Duration call,
           absl::Time now) {
    if (acks_.empty()) first_at_ = now;
    acks_.push_back({std::move(ref), WithoutPayload(item)});
    slow_ = slow_ || call >= kGatherFor;
  }
  // Whether the gathered acks are to commit before another handler call:
  // the most of them, the first waited kGatherFor, or a slow call.
  bool Due(absl::Time now) const {
    return !acks_.empty() &&
           (acks_.size() >= max_ || slow_ || now - first_at_ >= kGatherFor);
  }
  bool empty() const { return acks_.empty(); }
  size_t size() const { return acks_.size(); }
  // Hands them all over, oldest first, and starts afresh.
  std::vector<Ack> Take() {
    std::vector<Ack> taken;
    taken.swap(acks_);
    slow_ = false;
    first_at_ = absl::InfinitePast();
    return taken;
  }

 private:
  const size_t max_;
  std::vector<Ack> acks_;
  absl::Time first_at_ = absl::InfinitePast();
  bool slow_ = false;
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_GATHERED_ACKS_H_
