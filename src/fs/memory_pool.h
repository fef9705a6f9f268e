// MemoryBlock: one memory file mapped into the daemon, the memory of one
// file's bytes (fs/file_memory.h); and MemoryPool: the blocks no file holds
// now, kept, and made ahead, to be the next files' memory.
//
// A cold load that finds a block kept needs no memory made on its critical
// path: no file, no fresh pages (the costliest part of a load: on a VM
// whose freed pages go back to the host, ~2.5 CPU s per GiB), no mapping,
// no kernel registration. Blocks come back when a file's memory is let go
// (eviction, a cache drop, a newer version), and a thread of the pool
// makes blocks ahead of the loads, at low priority: one for each file
// stored and not loaded since (the loads to come: a connector loads the
// keys it stored), and a share of the budget in the sizes loads asked for
// and missed. Blocks of sizes no longer wanted make room for them.
//
// A block a client can still reach (ReachedByOthers: a client's open of
// the file it was served as, or a client's mapping, which keeps such an
// open) is never kept: a client's mapping must never show another file's
// bytes. Kept blocks count against a limit (what the file-memory cache
// leaves of its budget, set by it); what does not fit is freed.
//
// Thread safety: MemoryPool from any thread; its lock is taken last, with
// nothing else taken inside it. A MemoryBlock has one owner at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace kvfs::fs {

struct MemoryBlock {
  // A memory file of `map_bytes` (a multiple of 4 KiB), mapped, every page
  // made (ENOMEM or ENOSPC when the tmpfs or the memory cgroup cannot).
  static Result<std::unique_ptr<MemoryBlock>> Make(uint64_t map_bytes);
  ~MemoryBlock();
  // Makes every page of the mapping again, the file sized to it: for a
  // block whose file was cut (or grown) by its last use. Its bytes are the
  // last use's, not zeros.
  Status Remake();
  // Whether any open file or mapping other than the daemon's own reaches
  // the memory: then its bytes must not change.
  bool ReachedByOthers() const;

  int fd = -1;
  char* data = nullptr;
  uint64_t mapped = 0;
  // The id under which the front end lets the kernel read fd (0: none
  // yet), and what gives it back; it stays with the block when reused.
  int export_id = 0;
  std::function<void(int id)> export_release;
};

class MemoryPool {
 public:
  // `budget_bytes`: the file memory's budget; an eighth of it is kept made
  // ahead of loads that missed, in their size.
  explicit MemoryPool(uint64_t budget_bytes);
  // Stops the thread; frees the kept blocks.
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // A kept block of exactly `map_bytes`, its pages made again; null if
  // none (then blocks of that size are made ahead for the next loads).
  // Counts as the load of one Expect()ed file of that size.
  std::unique_ptr<MemoryBlock> Take(uint64_t map_bytes);
  // A load of `map_bytes` is coming (a file of that size was stored): a
  // block of that size is made ahead for it, within the limit.
  void Expect(uint64_t map_bytes);
  // Keeps `b` for reuse, or frees it (reached by others, or no room).
  void Give(std::unique_ptr<MemoryBlock> b);
  // Bytes the kept blocks may take. Returns the kept ones beyond it, for
  // the caller to free outside its own locks.
  [[nodiscard]] std::vector<std::unique_ptr<MemoryBlock>> SetLimit(uint64_t limit);
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  // Takes that found a block; blocks the thread made.
  uint64_t reused() const { return reused_.load(std::memory_order_relaxed); }
  uint64_t made_ahead() const { return made_ahead_.load(std::memory_order_relaxed); }

 private:
  void MakeAhead();
  // The size the thread should make a block of next; 0 if none. A kept
  // block of a size no longer wanted that stands in its way is moved to
  // `*unwanted`, for the caller to free outside the lock.
  uint64_t NextToMakeLocked(std::unique_ptr<MemoryBlock>* unwanted) REQUIRES(mu_);
  void KeepLocked(std::unique_ptr<MemoryBlock> b) REQUIRES(mu_);
  // Makes `map_bytes` the newest wanted size.
  void WantLocked(uint64_t map_bytes) REQUIRES(mu_);

  const uint64_t ahead_bytes_;
  mutable Mutex mu_;
  CondVar wake_;
  std::unordered_map<uint64_t, std::vector<std::unique_ptr<MemoryBlock>>> kept_ GUARDED_BY(mu_);
  uint64_t limit_ GUARDED_BY(mu_) = 0;
  // The sizes loads missed and files were stored at lately (newest last, a
  // few), to make ahead.
  std::vector<uint64_t> wanted_ GUARDED_BY(mu_);
  // Per size: files stored (Expect) that no load has taken a block for
  // since, at most what the budget holds of that size.
  std::unordered_map<uint64_t, uint64_t> expected_ GUARDED_BY(mu_);
  const uint64_t budget_bytes_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> reused_{0};
  std::atomic<uint64_t> made_ahead_{0};
  std::thread maker_;
};

}  // namespace kvfs::fs
