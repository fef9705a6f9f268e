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

// The capability is the NamespaceLock; its methods take and give back rw_,
// its own state, which the analysis would count as a second lock held past
// the call: they are not checked (NO_THREAD_SAFETY_ANALYSIS), being one
// forwarding call each.
class CAPABILITY("mutex") NamespaceLock {
 public:
  void lock() ACQUIRE() NO_THREAD_SAFETY_ANALYSIS {
    waiting_.fetch_add(1, std::memory_order_relaxed);
    rw_.lock();
    waiting_.fetch_sub(1, std::memory_order_relaxed);
  }
  bool try_lock() TRY_ACQUIRE(true) NO_THREAD_SAFETY_ANALYSIS { return rw_.try_lock(); }
  void unlock() RELEASE() NO_THREAD_SAFETY_ANALYSIS { rw_.unlock(); }
  void lock_shared() ACQUIRE_SHARED() NO_THREAD_SAFETY_ANALYSIS { rw_.lock_shared(); }
  bool try_lock_shared() TRY_ACQUIRE_SHARED(true) NO_THREAD_SAFETY_ANALYSIS {
    return rw_.try_lock_shared();
  }
  void unlock_shared() RELEASE_SHARED() NO_THREAD_SAFETY_ANALYSIS { rw_.unlock_shared(); }
  // True while a thread waits to take the lock exclusively.
  bool change_waiting() const { return waiting_.load(std::memory_order_relaxed) > 0; }

 private:
  RwLock rw_;
  std::atomic<int> waiting_{0};
};

// Holds a NamespaceLock exclusively for its scope.
using NamespaceWriteLock = WriterLock<NamespaceLock>;
// Holds a NamespaceLock shared for its scope; Unlock and Lock let a waiting
// change in (NamespaceLock::change_waiting).
using NamespaceReadLock = ReaderLock<NamespaceLock>;

}  // namespace kvfs::fs
