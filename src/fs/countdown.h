// Countdown: one job done in `parts` parts that end on any thread (device
// completions), with the first error kept. The part that ends last is told
// so and finishes the job with first().
//
//   auto job = std::make_shared<Job>();   // Job holds a Countdown
//   job->parts.Reset(reqs.size());
//   r.done = [job](Status st) { if (job->parts.Finish(st)) Complete(job->parts.first()); };
//
// Thread safety: Finish() from any thread; first() once Finish() returned
// true (every part has ended, so nothing writes it any more).
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>

#include "common/status.h"

namespace kvfs::fs {

class Countdown {
 public:
  explicit Countdown(size_t parts = 0) : left_(parts) {}
  Countdown(const Countdown&) = delete;
  Countdown& operator=(const Countdown&) = delete;

  // Sets the number of parts; before any part can end.
  void Reset(size_t parts) { left_.store(parts, std::memory_order_relaxed); }
  // Records the end of one part (keeping `st` if it is the first error).
  // Returns true for the last part, exactly once.
  [[nodiscard]] bool Finish(const Status& st) {
    if (!st.ok()) Note(st);
    return left_.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }
  // Records an error without ending a part.
  void Note(const Status& st) {
    std::lock_guard<std::mutex> l(mu_);
    if (first_.ok()) first_ = st;
  }
  // OK, or the first error recorded.
  Status first() const {
    std::lock_guard<std::mutex> l(mu_);
    return first_;
  }

 private:
  std::atomic<size_t> left_;
  mutable std::mutex mu_;
  Status first_;  // GUARDED_BY(mu_)
};

}  // namespace kvfs::fs
