// Access times: when a use of a file moves its atime, and how the moved
// atimes reach the index without an index write per read.
//
// Rules (AtimeDue), as Linux's mount options, for a file's read or open
// for reading and a directory's listing (OpenDir):
//   relatime (default): a read or an open for reading sets atime to now
//     when atime is not newer than mtime or ctime, or is 24 hours old or
//     more.
//   strictatime: every read or open for reading sets it.
//   noatime: never (only utimensat/touch set it).
//
// Persistence: a moved atime changes only the live record (InodeState::rec)
// and marks the inode dirty in an AtimeLog, which pins it. It reaches the
// index with the next commit capturing the inode for any reason (the
// record carries it), else in the AtimeLog's periodic flush: every
// `interval` the dirty inodes are queued as ordinary record changes, at
// most kAtimeBatch inodes per change, and all of them at Shutdown(). A
// crash may lose the atimes moved in the last interval (they go back to
// the committed ones), nothing else. So a loop of reads makes at most one
// index commit per file per interval, and under relatime at most one per
// file per day unless the file is written.
//
// The eviction policy (fs/recency.h) keeps its exact order in memory and
// rebuilds it at mount from these persisted atimes.
//
// Thread safety: AtimeLog's methods may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "fs/file_system.h"
#include "fs/inode_table.h"
#include "index/records.h"

namespace kvfs::fs {

inline constexpr int64_t kRelatimeMaxAgeNs = int64_t{24} * 3600 * 1000000000;

// Whether a use at `now_ns` moves the atime of `rec` under `mode`.
constexpr bool AtimeDue(AtimeMode mode, const index::Inode& rec, int64_t now_ns) {
  switch (mode) {
    case AtimeMode::kNoatime:
      return false;
    case AtimeMode::kStrictatime:
      return rec.atime_ns != now_ns;
    case AtimeMode::kRelatime:
      return rec.atime_ns <= rec.mtime_ns || rec.atime_ns <= rec.ctime_ns ||
             now_ns - rec.atime_ns >= kRelatimeMaxAgeNs;
  }
  return false;
}

// Inodes whose live atime is ahead of the index, and the thread that
// queues them for commit.
class AtimeLog {
 public:
  // Dirty inodes at which the flush starts early (bounds the pins held).
  static constexpr size_t kEarlyFlush = 16384;
  // Inodes per queued change.
  static constexpr size_t kAtimeBatch = 4096;

  // flush(pins) queues changes for the inodes pinned (those still dirty);
  // it runs on the log's thread, or on the caller of Flush().
  using FlushFn = std::function<void(std::vector<InodePin>)>;
  AtimeLog(std::chrono::milliseconds interval, FlushFn flush);
  ~AtimeLog();  // Stop()

  // The inode's atime moved (its `atime_dirty` was false and is now true):
  // keeps `pin` until the next flush. REQUIRES: the inode's mu held.
  void Add(InodePin pin);
  // Runs the flush now, on this thread, for everything added so far.
  void Flush();
  // Stops the thread (no flush: Shutdown() calls Flush() first).
  void Stop();
  // Test hook: returns once every inode added before the call has been
  // flushed (its change queued), by the log's thread or Flush(); or at
  // Stop(). Starts no flush itself.
  void WaitFlushed();
  // Flushes run so far (their changes queued) and atimes moved so far
  // (stats).
  uint64_t flushes() const { return flushes_.load(std::memory_order_relaxed); }
  uint64_t updates() const { return updates_.load(std::memory_order_relaxed); }

 private:
  void Run();

  const std::chrono::milliseconds interval_;
  const FlushFn flush_;
  Mutex mu_;
  CondVar cv_;
  std::vector<InodePin> dirty_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  // Inodes added, and of those the first `flushed_` flushed (WaitFlushed).
  uint64_t added_ GUARDED_BY(mu_) = 0, flushed_ GUARDED_BY(mu_) = 0;
  // Serializes flushes (the thread's and Flush()'s), so that changes are
  // queued in the order the atimes were taken.
  Mutex flush_mu_;
  std::atomic<uint64_t> flushes_{0};
  std::atomic<uint64_t> updates_{0};
  std::thread thread_;
};

}  // namespace kvfs::fs
