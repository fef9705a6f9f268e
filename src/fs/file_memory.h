// FileMemory: one file's bytes in memory that the kernel can read itself,
// and FileMemoryCache: the files kept that way, within a byte budget.
//
// A FileMemory is a memfd holding exactly one version of a file's bytes at
// their offsets, mapped into the daemon. It is filled from the device by
// O_DIRECT reads straight into its pages (fs/cache_loads.cc), then read by
// kvfs's own read paths (read(2) replies, the batch READ) and, through the
// front end, by the kernel: an open may be served from fd() with no request
// per read reaching the daemon (FUSE passthrough in fuse/; fs/ does not
// know the mechanism, only that the kernel may read and write fd()).
//
// Versions: an entry is valid for the file version it was loaded from (its
// size and each chunk's installed version, MemoryVersion). While opens are
// served from it (serves_opens(); the protocol is the file's FileData's,
// fs/file_data.h) it is the file's authority instead: writes through those
// opens land in it, and fs/ writes them out.
//
// Lifetime: the cache holds one reference per file (keyed by the owning
// InodeState's token); handles served from an entry hold more. Dropping
// the cache's reference (eviction, a newer version) lets the memory go
// once the last handle is closed: its memory file (a MemoryBlock: the
// file, its mapping and the id the front end exported it under) goes back
// to the cache's MemoryPool, which hands it to the next file's load, or
// frees it, running the release hook of that id so the kernel lets go too.
//
// Thread safety: all methods are safe from any thread. Waiters run on the
// thread that calls Finish(), without any lock held.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "fs/file_data.h"  // MemoryVersion
#include "fs/memory_pool.h"

namespace kvfs::fs {


class FileMemory {
 public:
  enum class State { kLoading, kReady, kFailed };

  // The memory of `version`: `block` (of at least the file's size), which
  // goes back to `pool` (if any) when this is destroyed. `zeroed`: the
  // block is all zeros (made for it); otherwise it holds a former file's
  // bytes, which its load must overwrite or clear.
  FileMemory(std::unique_ptr<MemoryBlock> block, bool zeroed, MemoryVersion version,
             std::shared_ptr<MemoryPool> pool);
  ~FileMemory();
  FileMemory(const FileMemory&) = delete;
  FileMemory& operator=(const FileMemory&) = delete;

  int fd() const { return fd_; }
  char* data() const { return data_; }
  // Bytes mapped at data(); device reads land anywhere below this.
  uint64_t mapped() const { return mapped_; }
  bool zeroed() const { return zeroed_; }
  const MemoryVersion& version() const { return version_; }
  // The bytes the cache counts against its budget.
  uint64_t bytes() const { return mapped_; }

  // Runs fn(true) now if ready, fn(false) now if failed, or later from
  // Finish(). Returns false (and does not call fn) when not loading.
  bool WaitIfLoading(std::function<void(bool ok)> fn);
  State state() const;
  bool has_waiters() const;
  // The load ended: on success the memfd is cut to the file's size (the
  // kernel reads up to the memfd's size). Runs the waiters.
  void Finish(bool ok);

  // The id under which the front end lets the kernel read fd(): made by
  // `make(fd)` at the first call (under this entry's lock, so every caller
  // gets the same id), released by `release(id)` when the entry is freed.
  // A failed make (a negative id) is returned, not kept.
  int ExportId(const std::function<int(int fd)>& make, std::function<void(int id)> release);
  // The id made by ExportId, or 0.
  int export_id() const;

  // Opens are served from it (the file's authority then: writes through
  // them land in it), or wait for its load to be served. Published by the
  // owning file's FileData (fs/file_data.h), which alone keeps the counts,
  // under the inode's lock; read by the cache, which keeps such an entry.
  bool serves_opens() const { return serves_opens_.load(std::memory_order_acquire); }
  bool awaited() const { return awaited_.load(std::memory_order_acquire); }
  // Loaded speculatively and not used yet (the prefetch budget).
  std::atomic<bool> unused_prefetch{false};
  // Held by a write-out of the bytes to the file (fs/file_ops.cc), so
  // that write-outs run one at a time. Before the owning inode's mu in the
  // lock order.
  Mutex& writeout_mu() RETURN_CAPABILITY(writeout_mu_) { return writeout_mu_; }

 private:
  friend class FileData;  // the one writer of serves_opens_ and awaited_

  const std::shared_ptr<MemoryPool> pool_;
  const int fd_;
  char* const data_;
  const uint64_t mapped_;
  const bool zeroed_;
  const MemoryVersion version_;

  Mutex writeout_mu_;
  mutable Mutex mu_;
  State state_ GUARDED_BY(mu_) = State::kLoading;
  std::vector<std::function<void(bool)>> waiters_ GUARDED_BY(mu_);
  // Its export id and release hook live in the block.
  std::unique_ptr<MemoryBlock> block_ GUARDED_BY(mu_);
  std::atomic<bool> serves_opens_{false};
  std::atomic<bool> awaited_{false};
};

struct FileMemoryCounters {
  uint64_t budget_bytes = 0;
  uint64_t bytes = 0;        // held by the cache
  uint64_t files = 0;        // entries
  uint64_t loads = 0;        // entries made
  uint64_t load_bytes = 0;   // bytes of the files loaded
  uint64_t dropped = 0;      // entries evicted for room
  uint64_t no_room = 0;      // loads refused: the budget is held by open files
  uint64_t unused_prefetch_bytes = 0;
  uint64_t hits = 0;                   // uses: served opens, reads answered
  uint64_t prefetched_bytes = 0;       // loaded speculatively
  uint64_t prefetch_used_bytes = 0;    // of those, later used
  uint64_t prefetch_wasted_bytes = 0;  // of those, dropped unused
  uint64_t served_opens = 0;   // opens served from file memory
  uint64_t served_bytes = 0;   // the sizes of the files at those opens
  uint64_t kept_bytes = 0;     // memory kept for the next loads (MemoryPool)
  uint64_t reused = 0;         // loads into kept memory, none made for them
  uint64_t made_ahead = 0;     // blocks made ahead of the loads
};

class FileMemoryCache {
 public:
  // Entries and the memory kept for the next loads (MemoryPool) stay
  // within `budget_bytes` together; entries come first (kept memory is
  // freed to make room for them).
  explicit FileMemoryCache(uint64_t budget_bytes);

  // Memory for `version`, `map_bytes` long (a multiple of 4 KiB): a kept
  // block of that size; at a full budget, the memory of the entries evicted
  // for it (as Insert with `prefetch` would), if one has that size; else a
  // new one. Errors: ENOMEM, ENOSPC, EMFILE...
  Result<std::shared_ptr<FileMemory>> Make(MemoryVersion version, uint64_t map_bytes,
                                           bool prefetch);
  // Loads of files of `map_bytes` are coming: memory of that size is made
  // ahead of them (MemoryPool::Expect).
  void ExpectLoad(uint64_t map_bytes) { pool_->Expect(map_bytes); }
  // The entry of `owner`, bumped in the LRU order; null if none.
  std::shared_ptr<FileMemory> Get(uint64_t owner);
  // Makes `m` the entry of `owner` (replacing an older one), evicting the
  // least recently used entries no open uses until it fits. False (and
  // nothing kept) when open files hold the room.
  bool Insert(uint64_t owner, const std::shared_ptr<FileMemory>& m, bool prefetch);
  // Drops the entry of `owner` if it is `m` (any entry when m is null),
  // unless opens are served from it.
  void Erase(uint64_t owner, const FileMemory* m = nullptr);
  void Clear();
  // A speculative load was used: it no longer counts as unused.
  void MarkUsed(FileMemory& m);
  // An open loads `m` for itself: counted as a whole-file prefetch that
  // is used at once (as the chunk cache counts an open's load).
  void NoteOpenLoad(const FileMemory& m) {
    prefetched_.fetch_add(m.bytes(), std::memory_order_relaxed);
    prefetch_used_.fetch_add(m.bytes(), std::memory_order_relaxed);
  }
  // An open was served from `m`, a file of `bytes` (the kernel's reads are
  // not seen: the open stands for them).
  void NoteServed(FileMemory& m, uint64_t bytes) {
    MarkUsed(m);
    served_opens_.fetch_add(1, std::memory_order_relaxed);
    served_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  uint64_t unused_prefetch_bytes() const {
    return unused_prefetch_bytes_.load(std::memory_order_relaxed);
  }
  FileMemoryCounters counters() const;

 private:
  struct Slot {
    std::shared_ptr<FileMemory> memory;
    std::list<uint64_t>::iterator lru;
  };
  // The removed entries are appended to `gone` (freed by the caller
  // outside the lock: ~FileMemory makes system calls).
  void EraseLocked(std::unordered_map<uint64_t, Slot>::iterator it,
                   std::vector<std::shared_ptr<FileMemory>>* gone) REQUIRES(mu_);

  // Sets the pool's limit to what the entries leave of the budget.
  void LimitPoolLocked() REQUIRES(mu_);
  // Evicts the least recently used entries no open uses until `need` more
  // bytes fit (as Insert with `prefetch`), into `gone`.
  void EvictLocked(uint64_t need, bool prefetch, std::vector<std::shared_ptr<FileMemory>>* gone)
      REQUIRES(mu_);

  const uint64_t budget_;
  const std::shared_ptr<MemoryPool> pool_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Slot> slots_ GUARDED_BY(mu_);
  std::list<uint64_t> lru_ GUARDED_BY(mu_);  // front = most recent
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> unused_prefetch_bytes_{0};
  std::atomic<uint64_t> loads_{0}, load_bytes_{0}, dropped_{0}, no_room_{0};
  std::atomic<uint64_t> served_opens_{0}, served_bytes_{0};
  std::atomic<uint64_t> hits_{0}, prefetched_{0}, prefetch_used_{0}, wasted_{0};
};

}  // namespace kvfs::fs
