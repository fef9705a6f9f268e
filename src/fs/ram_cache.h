// RamCache: kvfs's RAM cache as one part: the chunk cache (whole chunks in
// a buddy arena whose memory is registered with the io engine in the
// background, fs/cache_registrar.h) and, with file memory on, per-file
// memory (fs/file_memory.h), which then takes 3/4 of the budget. It owns
// their memory and tears them down in the one safe order: file memory and
// chunk entries, then the registrar (unregistering the arena), then the
// arena.
//
// Thread safety: any thread, as the caches it holds. StopRegistering only
// once no device I/O into the cache is in flight.
#pragma once

#include <cstdint>
#include <memory>

#include "common/buddy_arena.h"
#include "common/status.h"
#include "fs/cache_registrar.h"
#include "fs/cache_stats.h"
#include "fs/chunk_cache.h"
#include "fs/file_memory.h"
#include "volume/volume.h"

namespace kvfs::fs {

class RamCache {
 public:
  // A cache of `cache_bytes` in all whose memory `volume`'s engine reads
  // into; with `file_memory`, 3/4 of it per-file memory. Fails with the
  // arena's error (ENOMEM). `volume` must outlive it.
  static Result<std::unique_ptr<RamCache>> Create(volume::Volume& volume, uint64_t cache_bytes,
                                                  bool file_memory);
  RamCache(const RamCache&) = delete;
  RamCache& operator=(const RamCache&) = delete;

  ChunkCache& chunks() { return *chunks_; }
  // Null with file memory off.
  FileMemoryCache* memory() { return memory_.get(); }

  // Inode `token` left memory: both caches forget what it owned.
  void EraseOwner(uint64_t token);
  // Drops every entry not in use (files being served stay).
  void Clear();
  // Loaded speculatively (prefetch) and not read yet, in both caches.
  uint64_t speculative_bytes() const;
  // The cache as operators see it: both caches' counters added up.
  CacheStats View() const;
  // Stops registering the arena and unregisters it (CacheRegistrar::Stop).
  void StopRegistering() { registrar_->Stop(); }

 private:
  // `memory_bytes`: file memory's budget, with `file_memory` on.
  RamCache(std::unique_ptr<BuddyArena> arena, std::unique_ptr<CacheRegistrar> registrar,
           bool file_memory, uint64_t memory_bytes);

  // Declared in this order, destroyed in the reverse: see the top.
  std::unique_ptr<BuddyArena> arena_;
  std::unique_ptr<CacheRegistrar> registrar_;
  std::unique_ptr<ChunkCache> chunks_;
  std::unique_ptr<FileMemoryCache> memory_;
};

}  // namespace kvfs::fs
