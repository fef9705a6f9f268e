// CacheStats: the RAM cache's counters (fs/chunk_cache.h counts them;
// FileSystem::cache_stats() and fs/stats.h report them). A header of its
// own so that the cache and the stats snapshot need not include the facade
// (fs/file_system.h) that sits above them.
//
// Thread safety: a plain value, copied out of the cache under its lock.
#pragma once

#include <cstdint>

namespace kvfs::fs {

struct CacheStats {
  uint64_t hits = 0;      // reads served from the cache
  uint64_t entries = 0;   // chunks held
  uint64_t misses = 0;    // reads that went to the device
  uint64_t bytes = 0;     // bytes held
  uint64_t budget = 0;    // the bound on bytes held (cache_mb)
  uint64_t prefetched_bytes = 0;       // read by prefetch
  uint64_t prefetch_used_bytes = 0;    // prefetched, later read
  uint64_t prefetch_wasted_bytes = 0;  // prefetched, dropped unread
};

}  // namespace kvfs::fs
