#include "fs/ram_cache.h"

namespace kvfs::fs {

Result<std::unique_ptr<RamCache>> RamCache::Create(volume::Volume& volume, uint64_t cache_bytes,
                                                   bool file_memory) {
  const uint64_t memory_bytes = file_memory ? cache_bytes / 4 * 3 : 0;
  // Declared first, the arena goes last if this fails: after the registrar
  // has stopped and unregistered it.
  std::unique_ptr<BuddyArena> arena;
  auto registrar = std::make_unique<CacheRegistrar>(volume);
  KVFS_ASSIGN_OR_RETURN(arena, BuddyArena::Create(cache_bytes - memory_bytes,
                                                  [r = registrar.get()](const char* base,
                                                                        size_t len) {
                                                    r->Enqueue(base, len);
                                                  }));
  return std::unique_ptr<RamCache>(
      new RamCache(std::move(arena), std::move(registrar), file_memory, memory_bytes));
}

RamCache::RamCache(std::unique_ptr<BuddyArena> arena, std::unique_ptr<CacheRegistrar> registrar,
                   bool file_memory, uint64_t memory_bytes)
    : arena_(std::move(arena)),
      registrar_(std::move(registrar)),
      chunks_(std::make_unique<ChunkCache>(*arena_)) {
  if (file_memory) memory_ = std::make_unique<FileMemoryCache>(memory_bytes);
}

void RamCache::EraseOwner(uint64_t token) {
  chunks_->EraseOwner(token);
  if (memory_) memory_->Erase(token);
}

void RamCache::Clear() {
  chunks_->Clear();
  if (memory_) memory_->Clear();
}

uint64_t RamCache::speculative_bytes() const {
  return chunks_->unused_prefetch_bytes() + (memory_ ? memory_->unused_prefetch_bytes() : 0);
}

CacheStats RamCache::View() const {
  CacheStats c = chunks_->counters();
  if (!memory_) return c;
  const FileMemoryCounters m = memory_->counters();
  c.hits += m.hits;
  c.entries += m.files;
  c.bytes += m.bytes;
  c.budget += m.budget_bytes;
  c.prefetched_bytes += m.prefetched_bytes;
  c.prefetch_used_bytes += m.prefetch_used_bytes;
  c.prefetch_wasted_bytes += m.prefetch_wasted_bytes;
  return c;
}

}  // namespace kvfs::fs
