// NamespaceLock: the namespace's reader-writer lock (common/rw_lock.h:
// writers first), which also tells a reader holding it that a change is
// waiting, so that a long read-only run (a batch's EXISTS names) can let
// the change in between two names instead of making it wait for the run.
// A capability clang's -Wthread-safety checks (common/thread_annotations.h):
// take it with NamespaceWriteLock or NamespaceReadLock.
//
//   NamespaceReadLock ns(ns_.mu());   // lookups, walks, listings
//   NamespaceWriteLock ns(ns_.mu());  // a name change, built and queued
//
// Thread safety: as RwLock. Lockable and SharedLockable.
#pragma once

#include <atomic>

#include "common/rw_lock.h"
#include "common/thread_annotations.h"

namespace kvfs::fs {

class CAPABILITY("mutex") NamespaceLock {
 public:
  void lock() ACQUIRE() {
    waiting_.fetch_add(1, std::memory_order_relaxed);
    rw_.lock();
    waiting_.fetch_sub(1, std::memory_order_relaxed);
  }
  bool try_lock() TRY_ACQUIRE(true) { return rw_.try_lock(); }
  void unlock() RELEASE() { rw_.unlock(); }
  void lock_shared() ACQUIRE_SHARED() { rw_.lock_shared(); }
  bool try_lock_shared() TRY_ACQUIRE_SHARED(true) { return rw_.try_lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { rw_.unlock_shared(); }
  // True while a thread waits to take the lock exclusively.
  bool change_waiting() const { return waiting_.load(std::memory_order_relaxed) > 0; }

 private:
  RwLock rw_;
  std::atomic<int> waiting_{0};
};

// Holds a NamespaceLock exclusively for its scope.
class SCOPED_CAPABILITY NamespaceWriteLock {
 public:
  explicit NamespaceWriteLock(NamespaceLock& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~NamespaceWriteLock() RELEASE() { mu_.unlock(); }
  NamespaceWriteLock(const NamespaceWriteLock&) = delete;
  NamespaceWriteLock& operator=(const NamespaceWriteLock&) = delete;

 private:
  NamespaceLock& mu_;
};

// Holds a NamespaceLock shared for its scope; Unlock and Lock let a waiting
// change in (NamespaceLock::change_waiting).
class SCOPED_CAPABILITY NamespaceReadLock {
 public:
  explicit NamespaceReadLock(NamespaceLock& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.lock_shared(); }
  ~NamespaceReadLock() RELEASE() {
    if (held_) mu_.unlock_shared();
  }
  NamespaceReadLock(const NamespaceReadLock&) = delete;
  NamespaceReadLock& operator=(const NamespaceReadLock&) = delete;
  void Unlock() RELEASE() {
    held_ = false;
    mu_.unlock_shared();
  }
  void Lock() ACQUIRE_SHARED() {
    mu_.lock_shared();
    held_ = true;
  }

 private:
  NamespaceLock& mu_;
  bool held_ = true;
};

}  // namespace kvfs::fs
