// StickyError: the first error recorded, kept for every later caller -- a
// part that fails once and then refuses all further work (the index after a
// failed write, the committer after a failed device flush).
//
//   if (Status st = failure_.Get(); !st.ok()) return st;
//   ...
//   return failure_.Record(Write());  // kept if it is the first error
//
// Get() is one atomic load while nothing has failed (it sits on hot paths).
// Thread safety: all methods are safe from any thread.
#pragma once

#include <atomic>
#include <mutex>

#include "common/status.h"

namespace kvfs {

class StickyError {
 public:
  // Keeps `st` if it is an error and the first one; returns `st`.
  Status Record(Status st) {
    if (st.ok()) return st;
    std::lock_guard<std::mutex> l(mu_);
    if (first_.ok()) {
      first_ = st;
      set_.store(true, std::memory_order_release);
    }
    return st;
  }
  // OK, or the first error recorded.
  Status Get() const {
    if (!set_.load(std::memory_order_acquire)) return Status::OK();
    std::lock_guard<std::mutex> l(mu_);
    return first_;
  }

 private:
  std::atomic<bool> set_{false};  // set once, after first_ is
  mutable std::mutex mu_;
  Status first_;  // GUARDED_BY(mu_)
};

}  // namespace kvfs
