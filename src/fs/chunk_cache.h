// ChunkCache: kvfs's RAM cache of file data, in whole chunks.
//
// The kernel page cache is bypassed for chunk data (FOPEN_DIRECT_IO), so
// this is the only cache and memory is not spent twice. Entries are filled by
// prefetch (open-time, lookup-driven, hints) and read by foreground reads; a
// read that finds an entry still loading waits for it instead of reading the
// device again.
//
// Correct under change by construction: an entry is keyed by the owning
// InodeState's token, the chunk index and the chunk's installed version. A
// write, truncate or delete installs a new version (or drops the chunk), so a
// stale entry can never be hit; fs/ also erases such entries at once to give
// their memory back.
//
// Memory: entries are blocks of a BuddyArena (registered with the io engine,
// so loads into them are READ_FIXED), and the arena is the budget: entries
// (loading or ready) never hold more than its bytes. StartLoad() evicts
// least-recently-used ready entries until a block of the size it needs is
// free, and refuses (returns null; the read goes around the cache) when
// loads still in flight hold the room. While the arena is still making its
// memory, a prefetch does not evict unread prefetched entries.
//
// Thread safety: all methods are safe from any thread. Waiter callbacks run
// on the thread that calls Finish(), without any cache lock held.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "common/buddy_arena.h"
#include "common/mutex.h"
#include "fs/cache_stats.h"

namespace kvfs::fs {

struct CachedChunk {
  enum class State { kLoading, kReady, kFailed };

  ArenaBlock data;  // kBlockSize aligned, at least `capacity` bytes; not zeroed
  uint64_t capacity = 0;
  uint64_t version = 0;
  bool prefetched = false;

  // Runs fn(true) now if ready, fn(false) now if failed, or later from
  // Finish(). Returns false (and does not call fn) if the entry was ready or
  // failed -- the caller then uses state() directly. 
  bool WaitIfLoading(std::function<void(bool ok)> fn);
  State state() const;
  // True while it is loading and a reader waits for it.
  bool has_waiters() const;
  // Marks the load done and runs the waiters.
  void Finish(bool ok);

  std::atomic<bool> used{false};

 private:
  mutable Mutex mu_;
  State state_ GUARDED_BY(mu_) = State::kLoading;
  std::vector<std::function<void(bool)>> waiters_ GUARDED_BY(mu_);
};

// Counters are reported as fs::CacheStats (fs/cache_stats.h).
using CacheCounters = CacheStats;

class ChunkCache {
 public:
  // `arena` must outlive the cache and every entry it handed out.
  explicit ChunkCache(BuddyArena& arena);
  ~ChunkCache();

  // The entry of (owner, chunk) if it holds `version`; bumps it in the LRU.
  // Counts a hit, and a miss unless !count_miss (the caller looks again).
  std::shared_ptr<CachedChunk> Get(uint64_t owner, uint64_t chunk, uint64_t version,
                                   bool count_miss = true);
  // A new loading entry for (owner, chunk, version) of `capacity` bytes
  // (at most BuddyArena::kMaxBlock; its bytes are not zeroed), or null if
  // one already exists or no room can be made.
  std::shared_ptr<CachedChunk> StartLoad(uint64_t owner, uint64_t chunk, uint64_t version,
                                         uint64_t capacity, bool prefetch);
  void Erase(uint64_t owner, uint64_t chunk);
  void EraseOwner(uint64_t owner);
  void Clear();
  // Bytes of prefetched entries not yet read, to bound speculative loading.
  uint64_t unused_prefetch_bytes() const;
  CacheCounters counters() const;

 private:
  using Key = std::pair<uint64_t, uint64_t>;
  struct Slot {
    std::shared_ptr<CachedChunk> chunk;
    std::list<Key>::iterator lru;
  };
  void EraseLocked(std::map<Key, Slot>::iterator it) REQUIRES(mu_);
  // A block for `capacity` bytes, evicting ready entries as needed (for a
  // `prefetch`, none prefetched and not yet read); empty when loads in
  // flight (or readers of evicted entries) hold the room.
  ArenaBlock AllocateLocked(uint64_t capacity, bool prefetch) REQUIRES(mu_);

  BuddyArena& arena_;
  const uint64_t budget_;
  mutable Mutex mu_;
  std::map<Key, Slot> slots_ GUARDED_BY(mu_);
  std::list<Key> lru_ GUARDED_BY(mu_);  // front = most recent
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> hits_{0}, misses_{0}, prefetched_{0}, prefetch_used_{0}, wasted_{0};
};

}  // namespace kvfs::fs
