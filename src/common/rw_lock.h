// RwLock: a reader-writer lock that prefers writers.
//
// Why not std::shared_mutex: glibc's rwlock lets new readers in while a
// writer waits, so a steady stream of readers (a batch EXISTS of 10,000
// names on two runner threads, plus FUSE lookups) can hold off a writer
// (create, unlink, rename) for as long as the stream lasts. Here a waiting
// writer blocks new readers.
//
// A capability for clang's -Wthread-safety (common/thread_annotations.h):
// hold it through WriterLock or ReaderLock below, and a member
// GUARDED_BY it is checked (written only under the writer lock, read
// under either). Not recursive: a thread holding it shared must not take
// it again, or it deadlocks behind a waiting writer.
#pragma once

#include <pthread.h>

#include <shared_mutex>

#include "common/thread_annotations.h"

namespace kvfs {

class CAPABILITY("mutex") RwLock {
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

  void lock() ACQUIRE() { pthread_rwlock_wrlock(&rw_); }
  bool try_lock() TRY_ACQUIRE(true) { return pthread_rwlock_trywrlock(&rw_) == 0; }
  void unlock() RELEASE() { pthread_rwlock_unlock(&rw_); }
  void lock_shared() ACQUIRE_SHARED() { pthread_rwlock_rdlock(&rw_); }
  bool try_lock_shared() TRY_ACQUIRE_SHARED(true) { return pthread_rwlock_tryrdlock(&rw_) == 0; }
  void unlock_shared() RELEASE_SHARED() { pthread_rwlock_unlock(&rw_); }

 private:
  pthread_rwlock_t rw_;
};

// std::shared_mutex as a capability, for a lock whose writers are rare
// enough that glibc's reader preference does no harm (registering memory).
class CAPABILITY("mutex") SharedMutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  void lock_shared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds an annotated reader-writer lock `L` (RwLock, SharedMutex,
// fs::NamespaceLock)
// exclusively for its scope: `WriterLock ns(ns_mu_);`.
template <typename L>
class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(L& l) ACQUIRE(l) : l_(l) { l_.lock(); }
  ~WriterLock() RELEASE() { l_.unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  L& l_;
};

// Holds `L` shared for its scope; may be given back and taken again
// (Unlock/Lock), to let a waiting writer in between two steps of a long
// read-only run.
template <typename L>
class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(L& l) ACQUIRE_SHARED(l) : l_(l) { l_.lock_shared(); }
  ~ReaderLock() RELEASE() {
    if (held_) l_.unlock_shared();
  }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

  void Unlock() RELEASE() {
    held_ = false;
    l_.unlock_shared();
  }
  void Lock() ACQUIRE_SHARED() {
    l_.lock_shared();
    held_ = true;
  }

 private:
  L& l_;
  bool held_ = true;
};

}  // namespace kvfs
