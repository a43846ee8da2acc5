// One T per calling thread, made on first use: the exec handler's child
// process and the http handler's connection, so each worker thread has
// its own and never waits for another's.
//
// Thread safety: Get() may be called from any thread; the T it returns
// belongs to the calling thread.
#ifndef SQLGROUP_CLI_HANDLERS_PER_THREAD_H_
#define SQLGROUP_CLI_HANDLERS_PER_THREAD_H_

#include <map>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sqlgroup::cli {

template <typename T>
class PerThread {
 public:
  // The calling thread's T; null until Set.
  T* Get() {
    absl::MutexLock lock(&mu_);
    auto it = items_.find(std::this_thread::get_id());
    return it == items_.end() ? nullptr : it->second.get();
  }
  // Replaces the calling thread's T (destroying the old one, outside the
  // lock: a child's shutdown may take a while).
  void Set(std::unique_ptr<T> t) {
    std::unique_ptr<T> old;
    {
      absl::MutexLock lock(&mu_);
      old = std::exchange(items_[std::this_thread::get_id()], std::move(t));
    }
  }

 private:
  absl::Mutex mu_;
  std::map<std::thread::id, std::unique_ptr<T>> items_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_HANDLERS_PER_THREAD_H_
