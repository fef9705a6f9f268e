// The thread-safety check's probe (check_thread_safety.py): each CASE_*
// is one mistake the annotated locks must make clang refuse; with no case
// defined the file is correct and must compile clean.
#include "common/mutex.h"
#include "common/rw_lock.h"
#include "fs/namespace_lock.h"

namespace kvfs {
namespace {

class Counter {
 public:
  void Add() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    ++n_;
#ifdef CASE_WRITE_AFTER_UNLOCK
    lock.Unlock();
    ++n_;
#endif
  }
  void AddLocked() REQUIRES(mu_) { ++n_; }
  void AddTwice() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    AddLocked();
    lock.Unlock();
#ifdef CASE_MISSING_REQUIRES
    AddLocked();
#endif
  }
  void Reset() {
#ifdef CASE_UNGUARDED_WRITE
    n_ = 0;
#endif
  }
  void Take() ACQUIRE(mu_) { mu_.lock(); }
  void Give() RELEASE(mu_) { mu_.unlock(); }
  void Leak() {
    mu_.lock();
#ifndef CASE_RETURN_HOLDING
    mu_.unlock();
#endif
  }
  void WaitPositive() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    while (n_ <= 0) cv_.Wait(lock);
#ifdef CASE_READ_AFTER_UNLOCK
    lock.Unlock();
    if (n_ > 1) return;
#endif
  }

 private:
  Mutex mu_;
  CondVar cv_;
  int n_ GUARDED_BY(mu_) = 0;
};

class Names {
 public:
  int Read() EXCLUDES(mu_) {
    ReaderLock r(mu_);
#ifdef CASE_WRITE_UNDER_READER
    ++count_;
#endif
    int n = count_;
    r.Unlock();
    r.Lock();
    return n + count_;
  }
  void Write() EXCLUDES(mu_) {
    WriterLock w(mu_);
    ++count_;
  }

 private:
  fs::NamespaceLock mu_;
  int count_ GUARDED_BY(mu_) = 0;
};

}  // namespace

// Used, so that nothing above is unused.
int ThreadSafetyProbe() {
  Counter c;
  c.Add();
  c.AddTwice();
  c.Reset();
  c.Take();
  c.Give();
  c.Leak();
  c.WaitPositive();
  Names n;
  n.Write();
  return n.Read();
}

}  // namespace kvfs
