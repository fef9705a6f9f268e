// Prefetcher: the thread that starts speculative cache loads off the
// request path, and the queues that feed it.
//
// Two kinds of work reach it: inodes a lookup or getattr named (a
// connector checks which keys exist before it loads them: DESIGN.md
// "Queue depth for unmodified connectors"), and inode numbers the
// readahead detector guesses a serial load loop opens next
// (fs/readahead.h). Producers only queue and, when the thread sleeps,
// wake it; they never wait for cache memory or I/O submission (lookups run
// on the thread that receives every request).
//
// What wakes the thread is handed to `work` at once: the device is idle,
// and a request's first lookup is the key it loads first. What queues while
// the thread is busy is a stat storm's next lookups: it is gathered for
// kGather, so that a storm costs one wake-up and one device submission per
// kGather instead of one per lookup.
//
// Thread safety: Queue, NoteReadOpen and Clear from any thread; `work`
// runs on the prefetch thread only, never under the queues' mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "fs/inode_table.h"
#include "fs/readahead.h"

namespace kvfs::fs {

class Prefetcher {
 public:
  // Gets what was queued: inodes looked up, then readahead guesses (by
  // number: they may not be loaded). Either may be empty.
  using WorkFn = std::function<void(const std::vector<InodeRef>& looked_up,
                                    const std::vector<uint64_t>& guesses)>;
  // Speculative work: more than this queued is dropped.
  static constexpr size_t kMaxQueued = 4096;
  static constexpr std::chrono::microseconds kGather{200};

  // Starts the thread. `work` must stay callable until Stop().
  explicit Prefetcher(WorkFn work);
  ~Prefetcher();  // Stop()
  // Ends the thread after the pass it is in. Idempotent.
  void Stop();

  // Queues a prefetch of `inode` (looked up).
  void Queue(InodeRef inode);
  // An open for reading of `ino`: queues the readahead it implies.
  void NoteReadOpen(uint64_t ino);
  // Drops queued work and forgets the readahead streams (a cold cache is
  // not refilled by old lookups).
  void Clear();
  // Test hook: returns once everything queued before the call has been
  // handed to `work` and that pass has ended.
  void WaitIdle();

 private:
  void Loop();
  // Whether a producer that just queued work must signal the thread (once
  // until the thread next finds its queues empty).
  bool NeedsWakeLocked() REQUIRES(mu_);

  const WorkFn work_;
  Mutex mu_;
  CondVar cv_;
  std::vector<InodeRef> queue_ GUARDED_BY(mu_);
  std::vector<uint64_t> guesses_ GUARDED_BY(mu_);
  ReadaheadDetector readahead_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  bool wake_sent_ GUARDED_BY(mu_) = false;  // signalled, queues not yet found empty
  bool working_ GUARDED_BY(mu_) = false;  // a pass has taken work
  CondVar idle_cv_;
  std::thread thread_;
};

}  // namespace kvfs::fs
