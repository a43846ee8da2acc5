#include "member/shared_commit.h"

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
  const absl::StatusOr<std::vector<bool>> deleted = run(items);
  mu_.Lock();
  --in_flight_;
  ++commits_;
  items_ += static_cast<int64_t>(items.size());
  size_t at = 0;  // the place of each pending ack's first item in `items`
  for (Pending* p : batch) {
    p->result.status = deleted.status();
    p->result.led = p == leader;
    for (size_t i = 0; i < p->items.size(); ++i, ++at) {
      const bool one = deleted.ok() && at < deleted->size() && (*deleted)[at];
      p->result.deleted += one;
      if (deleted.ok()) p->result.each.push_back(one);
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

size_t SharedCommit::waiting() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

}  // namespace sqlgroup
