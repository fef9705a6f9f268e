// RwLock: a reader-writer lock that prefers writers.
//
// Why not std::shared_mutex: glibc's rwlock lets new readers in while a
// writer waits, so a steady stream of readers (a batch EXISTS of 10,000
// names on two runner threads, plus FUSE lookups) can hold off a writer
// (create, unlink, rename) for as long as the stream lasts. Here a waiting
// writer blocks new readers.
//
// Meets the standard Lockable and SharedLockable requirements
// (std::lock_guard, std::unique_lock, std::shared_lock). Not recursive: a
// thread holding it shared must not take it again, or it deadlocks behind
// a waiting writer.
#pragma once

#include <pthread.h>

namespace kvfs {

class RwLock {
 public:
  RwLock() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&rw_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  ~RwLock() { pthread_rwlock_destroy(&rw_); }
  RwLock(const RwLock&) = delete;
  RwLock& operator=(const RwLock&) = delete;

  void lock() { pthread_rwlock_wrlock(&rw_); }
  bool try_lock() { return pthread_rwlock_trywrlock(&rw_) == 0; }
  void unlock() { pthread_rwlock_unlock(&rw_); }
  void lock_shared() { pthread_rwlock_rdlock(&rw_); }
  bool try_lock_shared() { return pthread_rwlock_tryrdlock(&rw_) == 0; }
  void unlock_shared() { pthread_rwlock_unlock(&rw_); }

 private:
  pthread_rwlock_t rw_;
};

}  // namespace kvfs
