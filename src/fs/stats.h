// Live statistics of a mounted volume: the counters fs/ keeps and the
// snapshot FileSystem::Stats() returns. This is data only; the front end
// renders it (fuse/stats_render.h: JSON for MOUNT/.kvfs/stats and kvfsctl,
// Prometheus text for MOUNT/.kvfs/metrics), together with what only the
// front end knows (the FUSE transport, requests by opcode, batch
// registrations, write yields).
//
// A new counter: a field of StatsSnapshot (or of CacheStats), filled in by
// FileSystem::Stats() (file_system.cc), and one line in each of the two
// renderings (fuse/stats_render.cc).
//
// Counting is on the hot path: FsMetrics is atomics and lock-free
// histograms only (two relaxed adds per record).
//
// Thread safety: FsMetrics may be updated and snapshotted from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/histogram.h"
#include "fs/cache_stats.h"
#include "fs/file_memory.h"

namespace kvfs::fs {

// Daemon-side latency (a request's time in fs/, not the FUSE round trip).
enum class Op : uint8_t {
  kLookup = 0,
  kRead,
  kWrite,
  kPrefetch,
  kFsync,
  kGetattr,
  kCreate,
  kRename,
  kUnlink,
  kOpen,
  kCount
};
const char* OpName(Op op);

class FsMetrics {
 public:
  void Record(Op op, uint64_t ns, uint64_t bytes) {
    auto& m = ops_[static_cast<size_t>(op)];
    m.latency.Record(ns);
    if (bytes) m.bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  // Counts an error by errno, once per failed call.
  void Error(int code);
  // Bytes the whole-file calls (ReadFile/WriteFile) moved between the
  // device and the caller's memory without a copy.
  void ZeroCopy(uint64_t bytes) { zero_copy_bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  uint64_t zero_copy_bytes() const { return zero_copy_bytes_.load(std::memory_order_relaxed); }

  struct OpSnapshot {
    HistogramSnapshot latency;
    uint64_t bytes = 0;
  };
  std::array<OpSnapshot, static_cast<size_t>(Op::kCount)> Snapshot() const;
  std::map<int, uint64_t> Errors() const;

 private:
  struct PerOp {
    Histogram latency;
    std::atomic<uint64_t> bytes{0};
  };
  std::array<PerOp, static_cast<size_t>(Op::kCount)> ops_;
  std::atomic<uint64_t> zero_copy_bytes_{0};
  mutable std::mutex errors_mu_;
  std::map<int, uint64_t> errors_;  // GUARDED_BY(errors_mu_); errors are rare
};

// Nanoseconds since `start`.
inline uint64_t ElapsedNs(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - start)
                                   .count());
}

struct LaneStats {
  std::string name;
  uint64_t ops = 0, bytes = 0, errors = 0, cancelled = 0, promoted = 0;
  uint32_t inflight = 0, queued = 0;
  HistogramSnapshot latency;
};

// One device of the volume: its I/O over every lane
// (io::Scheduler::DeviceSnapshots) and its data space (volume::DeviceSpace;
// over the devices these sum to the volume's total and free, as statfs
// reports them).
struct DeviceIoStats {
  std::string path;
  uint64_t ops = 0, bytes = 0, errors = 0;
  uint64_t inflight_commands = 0, queued = 0;
  uint64_t size_bytes = 0, free_bytes = 0, largest_free = 0;
  HistogramSnapshot latency;
};

struct StatsSnapshot {
  std::array<FsMetrics::OpSnapshot, static_cast<size_t>(Op::kCount)> ops;
  std::map<int, uint64_t> errors;  // errno -> count
  std::vector<LaneStats> lanes;
  std::vector<DeviceIoStats> devices;  // by device index
  CacheStats cache;
  // Per-file memory (fs/file_memory.h); budget_bytes 0 when it is off.
  FileMemoryCounters file_memory;
  uint64_t staged_bytes = 0;     // dirty data held in staging buffers
  uint64_t staging_bytes = 0;    // the staging bound (dirty_mb)
  uint64_t queued_commits = 0;
  uint64_t index_commits = 0;  // index batches written (Committer::commits)
  // Forgets beyond an inode's lookup count (InodeTable::Forget): a kvfs bug.
  uint64_t lookup_underflows = 0;
  // Reads and opens that moved an atime, and the atime flushes that queued
  // them (fs/atime.h).
  uint64_t atime_updates = 0, atime_flushes = 0;
  // EntryCache: names with a cached answer (found or missing), their bytes.
  uint64_t name_cache_entries = 0, name_cache_bytes = 0;
  uint64_t zero_copy_bytes = 0;  // FsMetrics::zero_copy_bytes()
  uint64_t total_bytes = 0, free_bytes = 0, largest_free = 0, free_extents = 0;
  // Eviction (fs/eviction.h): whether it is on, its watermarks (% of the
  // data space), and what the passes did.
  bool evict_on = false;
  unsigned evict_high_pct = 0, evict_low_pct = 0;
  int64_t evict_min_age_ns = 0;
  bool evict_scope_xattr = false;  // only trees marked user.kvfs.evict=lru
  uint64_t evicted_files = 0, evicted_bytes = 0, evict_passes = 0;
  uint64_t evict_passes_done = 0;  // finished; == evict_passes: none running
  uint64_t evict_writer_waits = 0, evict_writer_wait_ns = 0;
  int64_t evict_last_age_ns = 0;  // now - last use of the last file evicted
};

}  // namespace kvfs::fs
