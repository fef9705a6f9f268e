// Eviction: capacity watermarks. When the data space used reaches the high
// watermark, a background pass unlinks files in the victim order
// (fs/victim_order.h: least recently used first) until it is down to the
// low one; a writer that finds the volume full while something is
// evictable waits for the pass (bounded), then gets ENOSPC.
//
// What is never evicted (open files, uncommitted data, recent uses, out of
// scope) is fs/eviction_rules.h's. An eviction is an unlink through the
// ordered commit: crash-safe as unlink(2) is, its space free once committed.
//
// The Evictor here is the policy: when a pass runs, how far, in batches of
// kBatchFiles (the namespace lock is taken once per batch, so lookups and
// loads get in between), and the writers' wait. It knows nothing of inodes:
// its hooks measure space and evict.
//
// Passes run on the Evictor's own thread (RunPass hands its pass to it), at
// a lower CPU priority (nice +10) and paced, so that on a busy machine the
// loads' threads run first; a writer waiting for space evicts on its own
// thread, unpaced.
//
// Thread safety: every method may be called from any thread; the hooks run
// on the pass thread or, for ReserveWaiting, on the writer's.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace kvfs::fs {

enum class EvictScope { kMount, kXattr };

struct EvictionOptions {
  bool enabled = false;          // -o evict=lru
  unsigned high_pct = 90;        // a pass starts at this % of data space used
  unsigned low_pct = 80;         // and stops at this %
  int64_t min_age_ns = 60'000'000'000;  // a file used more recently stays
  EvictScope scope = EvictScope::kMount;
  // How long a write waits for eviction to free space before ENOSPC.
  std::chrono::milliseconds writer_wait{2000};
};

struct EvictionCounters {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t passes = 0;
  uint64_t passes_done = 0;  // passes finished; == passes: none is running
  uint64_t writer_waits = 0;
  uint64_t writer_wait_ns = 0;
  int64_t last_age_ns = 0;  // age (now - last use) of the last file evicted
};

class Evictor {
 public:
  struct Space {
    uint64_t used = 0;
    uint64_t total = 0;
  };
  struct Batch {
    uint64_t files = 0;
    uint64_t bytes = 0;
    int64_t last_age_ns = 0;
  };
  // A file evicted: the name it had.
  struct Gone {
    uint64_t parent = 0;
    std::string name;
    uint64_t ino = 0;
  };
  struct Hooks {
    std::function<Space()> space;
    // Evicts up to `max_files` of the oldest evictable files, stopping once
    // `bytes` of them are evicted, appending each to *gone. Zero files:
    // nothing is evictable now.
    std::function<Batch(size_t max_files, uint64_t bytes, std::vector<Gone>* gone)> evict;
    // Waits until the evictions queued so far are committed (space freed).
    std::function<void()> commit;
    // Told of each file evicted once its unlink is committed, on the
    // Evictor's own notify thread, holding no lock: so it may block (the
    // front end drops the name from the kernel's caches there).
    std::function<void(const Gone&)> evicted;
    // The clock of the writers' bounded wait and of the pause after a
    // fruitless pass. Tests step one of their own; by default (unset) the
    // steady clock.
    std::function<std::chrono::steady_clock::time_point()> now;
  };
  static constexpr size_t kBatchFiles = 32;
  // Background passes (and RunPass) pause this long between batches, so
  // that loads get the CPU and the namespace lock in between; a writer
  // waiting for space does not.
  static constexpr std::chrono::microseconds kPace{500};
  // A watermark pass that evicted nothing (everything protected) is not
  // tried again for this long, unless RunPass asks: each look walks the
  // protected files under the namespace lock.
  static constexpr std::chrono::milliseconds kFruitlessBackoff{1000};
  // Stop() waits this long for the notify thread, then leaves it.
  static constexpr std::chrono::seconds kNotifyStopWait{3};
  // How often the pass thread looks at the space used (one allocator
  // snapshot): the overshoot past the high watermark is what is written in
  // this long, and writers that find the volume full wake it at once.
  static constexpr std::chrono::milliseconds kPoll{20};

  Evictor(const EvictionOptions& options, Hooks hooks);
  ~Evictor() { Stop(); }
  void Stop();

  // Told after each allocation: wakes the pass thread at once when the
  // space used has reached the high watermark (else it looks every kPoll).
  void Allocated();
  // Evicts until used <= to_pct % of the space (or nothing more is
  // evictable), now, and returns the files evicted.
  uint64_t RunPass(unsigned to_pct);
  // A write found no space: until `reserve` (called holding no Evictor
  // lock) stops failing with ENOSPC, evicts (down to the low watermark, at
  // least `bytes`) and tries again, for at most options.writer_wait in
  // all. Returns reserve's last status: ENOSPC once nothing is evictable
  // or the wait is over.
  Status ReserveWaiting(const std::function<Status()>& reserve, uint64_t bytes);

  // Test hook: returns once the pass thread has looked at the space used
  // (and run the pass that called for, if any) after this call, with no
  // RunPass request pending. So "nothing is evicted" is proven by a look
  // that found nothing to do, not by a sleep.
  void WaitIdle();

  EvictionCounters counters() const;
  const EvictionOptions& options() const { return options_; }

 private:
  void Loop();
  void NotifyLoop();
  // One pass down to `target` bytes used; true if anything was evicted.
  // REQUIRES: pass_mu_ held.
  bool PassTo(uint64_t target, bool paced);
  void Count(const Batch& b);
  std::chrono::steady_clock::time_point Now() const;

  const EvictionOptions options_;
  const Hooks hooks_;
  std::timed_mutex pass_mu_;  // one pass at a time (thread, kvfsctl, writers)
  std::mutex mu_;
  std::condition_variable cv_;
  bool kicked_ = false;  // GUARDED_BY(mu_)
  // RunPass's requests: the latest target, and how many were asked for and
  // served. GUARDED_BY(mu_)
  uint64_t request_target_ = 0;
  uint64_t requests_asked_ = 0, requests_served_ = 0;
  bool stop_ = false;    // GUARDED_BY(mu_)
  std::deque<Gone> gone_;  // GUARDED_BY(mu_), for the notify thread
  bool notify_done_ = false;  // GUARDED_BY(mu_)
  uint64_t looks_ = 0;         // rounds of Loop() finished; GUARDED_BY(mu_)
  std::atomic<uint64_t> files_{0}, bytes_{0}, passes_{0}, passes_done_{0}, waits_{0}, wait_ns_{0};
  std::atomic<int64_t> last_age_ns_{0};
  // Last: started once everything above is set.
  std::thread thread_;
  std::thread notify_thread_;
};

}  // namespace kvfs::fs
