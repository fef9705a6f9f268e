// Mutex, MutexLock and CondVar: std::mutex, std::unique_lock and
// std::condition_variable with the annotations clang's -Wthread-safety
// checks (common/thread_annotations.h); libstdc++'s own carry none, so a
// member GUARDED_BY a std::mutex could not be checked.
//
//   Mutex mu_;
//   int n_ GUARDED_BY(mu_);
//   void Add() EXCLUDES(mu_) { MutexLock lock(mu_); ++n_; }
//
// A MutexLock may be released and taken again (Unlock/Lock), as
// std::unique_lock may; CondVar waits on one. Write a wait as a loop
// (`while (!ready_) cv_.Wait(lock);`): a predicate lambda is checked as a
// function of its own, which does not hold the lock.
//
// Thread safety: as the std types they wrap.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace kvfs {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the caller holds it (a callback documented to
  // run under the lock); checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    held_ = false;
    mu_.unlock();
  }
  void Lock() ACQUIRE() {
    mu_.lock();
    held_ = true;
  }
  bool held() const { return held_; }
  Mutex& mutex() const { return mu_; }

 private:
  friend class CondVar;
  Mutex& mu_;
  bool held_ = true;
};

class CondVar {
 public:
  // REQUIRES: lock held. Releases it while waiting; holds it on return.
  void Wait(MutexLock& lock) {
    std::unique_lock<std::mutex> native(lock.mu_.mu_, std::adopt_lock);
    cv_.wait(native);
    native.release();
  }
  // As Wait; false if `timeout` passed first (the lock is held either way).
  template <typename Rep, typename Period>
  bool WaitFor(MutexLock& lock, std::chrono::duration<Rep, Period> timeout) {
    return WaitUntil(lock, std::chrono::steady_clock::now() + timeout);
  }
  template <typename Clock, typename Duration>
  bool WaitUntil(MutexLock& lock, std::chrono::time_point<Clock, Duration> deadline) {
    std::unique_lock<std::mutex> native(lock.mu_.mu_, std::adopt_lock);
    bool woken = cv_.wait_until(native, deadline) == std::cv_status::no_timeout;
    native.release();
    return woken;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace kvfs
