#include "member/shared_commit.h"

#include <set>

namespace sqlgroup {

SharedCommit::Result SharedCommit::Ack(std::vector<store::TakeItem> items,
                                       const Run& run) {
  Pending own;
  own.items = std::move(items);
  absl::MutexLock lock(&mu_);
  queue_.push_back(&own);
  while (!own.done) {
    if (!own.taken && in_flight_ < max_in_flight_) {
      Lead(&own, run);
      continue;
    }
    // Its statement runs, or every line is busy: wait for a statement to
    // end (one may hold this ack, or free a line for it).
    ended_.Wait(&mu_);
  }
  return own.result;
}

void SharedCommit::Lead(const Pending* leader, const Run& run) {
  std::vector<Pending*> batch;
  std::vector<store::TakeItem> items;
  while (!queue_.empty() &&
         (batch.empty() ||
          items.size() + queue_.front()->items.size() <= kMaxItems)) {
    Pending* p = queue_.front();
    queue_.pop_front();
    p->taken = true;
    items.insert(items.end(), p->items.begin(), p->items.end());
    batch.push_back(p);
  }
  ++in_flight_;
  mu_.Unlock();
  const absl::StatusOr<std::vector<std::string>> deleted = run(items);
  std::set<std::string> gone;
  if (deleted.ok()) gone.insert(deleted->begin(), deleted->end());
  mu_.Lock();
  --in_flight_;
  ++commits_;
  items_ += static_cast<int64_t>(items.size());
  for (Pending* p : batch) {
    p->result.status = deleted.status();
    p->result.led = p == leader;
    p->result.shared_by = items.size();
    for (const store::TakeItem& item : p->items) {
      p->result.deleted += gone.count(item.id);
    }
    p->done = true;
  }
  ended_.SignalAll();
}

int64_t SharedCommit::commits() const {
  absl::MutexLock lock(&mu_);
  return commits_;
}

int64_t SharedCommit::items() const {
  absl::MutexLock lock(&mu_);
  return items_;
}

}  // namespace sqlgroup
