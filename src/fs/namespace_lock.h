// NamespaceLock: the namespace's reader-writer lock (common/rw_lock.h:
// writers first), which also tells a reader holding it that a change is
// waiting, so that a long read-only run (a batch's EXISTS names) can let
// the change in between two names instead of making it wait for the run.
//
// Thread safety: as RwLock. Lockable and SharedLockable.
#pragma once

#include <atomic>

#include "common/rw_lock.h"

namespace kvfs::fs {

class NamespaceLock {
 public:
  void lock() {
    waiting_.fetch_add(1, std::memory_order_relaxed);
    rw_.lock();
    waiting_.fetch_sub(1, std::memory_order_relaxed);
  }
  bool try_lock() { return rw_.try_lock(); }
  void unlock() { rw_.unlock(); }
  void lock_shared() { rw_.lock_shared(); }
  bool try_lock_shared() { return rw_.try_lock_shared(); }
  void unlock_shared() { rw_.unlock_shared(); }
  // True while a thread waits to take the lock exclusively.
  bool change_waiting() const { return waiting_.load(std::memory_order_relaxed) > 0; }

 private:
  RwLock rw_;
  std::atomic<int> waiting_{0};
};

}  // namespace kvfs::fs
