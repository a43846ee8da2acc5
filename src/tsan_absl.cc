// Tells ThreadSanitizer what Debian's Abseil does not: when an absl::Mutex
// is taken and released, a Notification notified, a shared Status freed.
// Compiled into ThreadSanitizer builds only.
//
// Debian builds Abseil without TSan, so the atomics inside its libraries are
// invisible to TSan: every access under a lock would look like a race, and
// so would the last copy of an error Status freeing what another thread's
// copy read. Abseil built with TSan annotates itself; here the same
// annotations go around the calls instead: cmake/Sanitize.cmake links with
// -Wl,--wrap=<symbol> for each SQLGROUP_DECLARE below, so our code's calls
// reach the wrapper, which calls the real function.
//
// A Condition runs inside the wrapped call, where TSan ignores accesses (as
// between Abseil's own pre/post annotations): a condition's reads are not
// checked, the code that writes what it reads is. Waits in reader mode are
// not modelled; nothing here takes a reader lock and waits.
#include <sanitizer/tsan_interface.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

// Abseil's mangled namespace, e.g. 4absl7debian3: cmake/Sanitize.cmake
// reads it from absl/base/options.h.
#ifndef SQLGROUP_ABSL_MANGLED_NS
#error "define SQLGROUP_ABSL_MANGLED_NS (cmake/Sanitize.cmake does)"
#endif

// The mangled name is "_ZN" or "_ZNK" (a const member), the namespace, then
// the class and function.
#define SQLGROUP_WRAP(z, rest) asm("__wrap_" z SQLGROUP_ABSL_MANGLED_NS rest)
#define SQLGROUP_REAL(z, rest) asm("__real_" z SQLGROUP_ABSL_MANGLED_NS rest)

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

// The real functions, with `this` as the first argument (the Itanium ABI
// passes it so), and their wrappers. cmake/Sanitize.cmake makes a --wrap
// flag of each SQLGROUP_DECLARE line: keep each on one line.
#define SQLGROUP_DECLARE(ret, name, z, rest, ...)     \
  ret Real##name(__VA_ARGS__) SQLGROUP_REAL(z, rest); \
  ret Wrap##name(__VA_ARGS__) SQLGROUP_WRAP(z, rest)

// clang-format off
SQLGROUP_DECLARE(void, Lock, "_ZN", "5Mutex4LockEv", Mutex*);
SQLGROUP_DECLARE(void, Unlock, "_ZN", "5Mutex6UnlockEv", Mutex*);
SQLGROUP_DECLARE(bool, TryLock, "_ZN", "5Mutex7TryLockEv", Mutex*);
SQLGROUP_DECLARE(void, ReaderLock, "_ZN", "5Mutex10ReaderLockEv", Mutex*);
SQLGROUP_DECLARE(void, ReaderUnlock, "_ZN", "5Mutex12ReaderUnlockEv", Mutex*);
SQLGROUP_DECLARE(bool, ReaderTryLock, "_ZN", "5Mutex13ReaderTryLockEv", Mutex*);
SQLGROUP_DECLARE(void, LockWhen, "_ZN", "5Mutex8LockWhenERKNS0_9ConditionE", Mutex*, const Condition&);
SQLGROUP_DECLARE(bool, LockWhenWithTimeout, "_ZN", "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE", Mutex*, const Condition&, Duration);
SQLGROUP_DECLARE(bool, LockWhenWithDeadline, "_ZN", "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE", Mutex*, const Condition&, Time);
SQLGROUP_DECLARE(void, ReaderLockWhen, "_ZN", "5Mutex14ReaderLockWhenERKNS0_9ConditionE", Mutex*, const Condition&);
SQLGROUP_DECLARE(bool, ReaderLockWhenWithTimeout, "_ZN", "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE", Mutex*, const Condition&, Duration);
SQLGROUP_DECLARE(bool, ReaderLockWhenWithDeadline, "_ZN", "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE", Mutex*, const Condition&, Time);
SQLGROUP_DECLARE(void, Await, "_ZN", "5Mutex5AwaitERKNS0_9ConditionE", Mutex*, const Condition&);
SQLGROUP_DECLARE(bool, AwaitWithTimeout, "_ZN", "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE", Mutex*, const Condition&, Duration);
SQLGROUP_DECLARE(bool, AwaitWithDeadline, "_ZN", "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE", Mutex*, const Condition&, Time);
SQLGROUP_DECLARE(void, Destroy, "_ZN", "5MutexD1Ev", Mutex*);
SQLGROUP_DECLARE(void, Wait, "_ZN", "7CondVar4WaitEPNS0_5MutexE", CondVar*, Mutex*);
SQLGROUP_DECLARE(bool, WaitWithTimeout, "_ZN", "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE", CondVar*, Mutex*, Duration);
SQLGROUP_DECLARE(bool, WaitWithDeadline, "_ZN", "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE", CondVar*, Mutex*, Time);
SQLGROUP_DECLARE(void, Notify, "_ZN", "12Notification6NotifyEv", Notification*);
SQLGROUP_DECLARE(void, WaitForNotification, "_ZNK", "12Notification19WaitForNotificationEv", const Notification*);
SQLGROUP_DECLARE(bool, WaitForNotificationWithTimeout, "_ZNK", "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", const Notification*, Duration);
SQLGROUP_DECLARE(bool, WaitForNotificationWithDeadline, "_ZNK", "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE", const Notification*, Time);
SQLGROUP_DECLARE(void, StatusUnref, "_ZN", "6Status15UnrefNonInlinedEm", uintptr_t);
// clang-format on

namespace {

constexpr unsigned kRead = __tsan_mutex_read_lock;
constexpr unsigned kTry = __tsan_mutex_try_lock;

// Each annotates one operation on `mu` for its lifetime, so a wrapper's
// return value is computed inside it.
class LockOp {
 public:
  LockOp(Mutex* mu, unsigned flags) : mu_(mu), flags_(flags) {
    __tsan_mutex_pre_lock(mu_, flags_);
  }
  ~LockOp() { __tsan_mutex_post_lock(mu_, flags_, 0); }
  // For a TryLock: whether it took the mutex.
  bool Took(bool taken) {
    if (!taken) flags_ |= __tsan_mutex_try_lock_failed;
    return taken;
  }

 private:
  Mutex* const mu_;
  unsigned flags_;
};

class UnlockOp {
 public:
  UnlockOp(Mutex* mu, unsigned flags) : mu_(mu), flags_(flags) {
    __tsan_mutex_pre_unlock(mu_, flags_);
  }
  ~UnlockOp() { __tsan_mutex_post_unlock(mu_, flags_); }

 private:
  Mutex* const mu_;
  const unsigned flags_;
};

// A wait that releases the held mutex and holds it again when it returns
// (Await, CondVar::Wait), timed out or not.
class WaitOp {
 public:
  explicit WaitOp(Mutex* mu) : mu_(mu) { __tsan_mutex_pre_unlock(mu_, 0); }
  ~WaitOp() {
    __tsan_mutex_post_unlock(mu_, 0);
    __tsan_mutex_pre_lock(mu_, 0);
    __tsan_mutex_post_lock(mu_, 0, 0);
  }

 private:
  Mutex* const mu_;
};

}  // namespace

void WrapLock(Mutex* mu) {
  LockOp op(mu, 0);
  RealLock(mu);
}
void WrapUnlock(Mutex* mu) {
  UnlockOp op(mu, 0);
  RealUnlock(mu);
}
bool WrapTryLock(Mutex* mu) {
  LockOp op(mu, kTry);
  return op.Took(RealTryLock(mu));
}
void WrapReaderLock(Mutex* mu) {
  LockOp op(mu, kRead);
  RealReaderLock(mu);
}
void WrapReaderUnlock(Mutex* mu) {
  UnlockOp op(mu, kRead);
  RealReaderUnlock(mu);
}
bool WrapReaderTryLock(Mutex* mu) {
  LockOp op(mu, kRead | kTry);
  return op.Took(RealReaderTryLock(mu));
}

// The LockWhen family holds the mutex on return, timed out or not.
void WrapLockWhen(Mutex* mu, const Condition& c) {
  LockOp op(mu, 0);
  RealLockWhen(mu, c);
}
bool WrapLockWhenWithTimeout(Mutex* mu, const Condition& c, Duration d) {
  LockOp op(mu, 0);
  return RealLockWhenWithTimeout(mu, c, d);
}
bool WrapLockWhenWithDeadline(Mutex* mu, const Condition& c, Time t) {
  LockOp op(mu, 0);
  return RealLockWhenWithDeadline(mu, c, t);
}
void WrapReaderLockWhen(Mutex* mu, const Condition& c) {
  LockOp op(mu, kRead);
  RealReaderLockWhen(mu, c);
}
bool WrapReaderLockWhenWithTimeout(Mutex* mu, const Condition& c, Duration d) {
  LockOp op(mu, kRead);
  return RealReaderLockWhenWithTimeout(mu, c, d);
}
bool WrapReaderLockWhenWithDeadline(Mutex* mu, const Condition& c, Time t) {
  LockOp op(mu, kRead);
  return RealReaderLockWhenWithDeadline(mu, c, t);
}

void WrapAwait(Mutex* mu, const Condition& c) {
  WaitOp op(mu);
  RealAwait(mu, c);
}
bool WrapAwaitWithTimeout(Mutex* mu, const Condition& c, Duration d) {
  WaitOp op(mu);
  return RealAwaitWithTimeout(mu, c, d);
}
bool WrapAwaitWithDeadline(Mutex* mu, const Condition& c, Time t) {
  WaitOp op(mu);
  return RealAwaitWithDeadline(mu, c, t);
}
void WrapWait(CondVar* cv, Mutex* mu) {
  WaitOp op(mu);
  RealWait(cv, mu);
}
bool WrapWaitWithTimeout(CondVar* cv, Mutex* mu, Duration d) {
  WaitOp op(mu);
  return RealWaitWithTimeout(cv, mu, d);
}
bool WrapWaitWithDeadline(CondVar* cv, Mutex* mu, Time t) {
  WaitOp op(mu);
  return RealWaitWithDeadline(cv, mu, t);
}

// A mutex's memory may hold another one later (on the stack, say).
void WrapDestroy(Mutex* mu) {
  __tsan_mutex_destroy(mu, 0);
  RealDestroy(mu);
}

// What happened before Notify() happened before a wait that saw it.
void WrapNotify(Notification* n) {
  __tsan_release(n);
  RealNotify(n);
}
void WrapWaitForNotification(const Notification* n) {
  RealWaitForNotification(n);
  __tsan_acquire(const_cast<Notification*>(n));
}
bool WrapWaitForNotificationWithTimeout(const Notification* n, Duration d) {
  const bool notified = RealWaitForNotificationWithTimeout(n, d);
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}
bool WrapWaitForNotificationWithDeadline(const Notification* n, Time t) {
  const bool notified = RealWaitForNotificationWithDeadline(n, t);
  if (notified) __tsan_acquire(const_cast<Notification*>(n));
  return notified;
}

// A non-OK Status shares one counted rep among its copies; the last Unref
// deletes it. The real decrement is acquire-release, as here.
void WrapStatusUnref(uintptr_t rep) {
  void* const counted = reinterpret_cast<void*>(rep);
  __tsan_release(counted);
  __tsan_acquire(counted);
  RealStatusUnref(rep);
}
