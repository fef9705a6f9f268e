#include "fs/chunk_cache.h"

namespace kvfs::fs {

bool CachedChunk::WaitIfLoading(std::function<void(bool ok)> fn) {
  MutexLock l(mu_);
  if (state_ != State::kLoading) return false;
  waiters_.push_back(std::move(fn));
  return true;
}

bool CachedChunk::has_waiters() const {
  MutexLock l(mu_);
  return state_ == State::kLoading && !waiters_.empty();
}

CachedChunk::State CachedChunk::state() const {
  MutexLock l(mu_);
  return state_;
}

void CachedChunk::Finish(bool ok) {
  std::vector<std::function<void(bool)>> w;
  {
    MutexLock l(mu_);
    state_ = ok ? State::kReady : State::kFailed;
    w.swap(waiters_);
  }
  for (auto& fn : w) fn(ok);
}

ChunkCache::ChunkCache(BuddyArena& arena) : arena_(arena), budget_(arena.region_bytes()) {}
ChunkCache::~ChunkCache() {
  // The arena's hook registers with what goes after the cache (the
  // registrar): no piece is made from here on.
  arena_.StopMaking();
  Clear();
}

std::shared_ptr<CachedChunk> ChunkCache::Get(uint64_t owner, uint64_t chunk, uint64_t version,
                                             bool count_miss) {
  MutexLock l(mu_);
  auto it = slots_.find({owner, chunk});
  if (it == slots_.end() || it->second.chunk->version != version) {
    if (count_miss) misses_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  hits_.fetch_add(1, std::memory_order_relaxed);
  auto& c = it->second.chunk;
  if (c->prefetched && !c->used.exchange(true)) {
    prefetch_used_.fetch_add(c->capacity, std::memory_order_relaxed);
  }
  c->used = true;
  return c;
}

void ChunkCache::EraseLocked(std::map<Key, Slot>::iterator it) {
  auto& c = it->second.chunk;
  if (c->prefetched && !c->used.load()) wasted_.fetch_add(c->capacity, std::memory_order_relaxed);
  bytes_ -= c->data.size();
  lru_.erase(it->second.lru);
  slots_.erase(it);
}

ArenaBlock ChunkCache::AllocateLocked(uint64_t capacity, bool prefetch) {
  const uint64_t need = BuddyArena::BlockBytes(capacity);
  if (need > budget_) return ArenaBlock();
  // Evict from the cold end, skipping loads in flight (readers may wait on
  // them; their buffers are owned by the read until it finishes anyway),
  // until the bytes fit and the arena has one block that large: the room
  // evictions make can be in pieces. Evictions beyond the budget are
  // bounded: entries that readers still hold free nothing yet, and the
  // cache must not be emptied for one chunk.
  constexpr int kMaxExtraEvictions = 16;
  const bool spare_unread = prefetch && arena_.made_bytes() < arena_.region_bytes();
  int extra = 0;
  auto it = lru_.end();
  for (;;) {
    if (bytes_ + need <= budget_) {
      ArenaBlock b = arena_.Allocate(capacity);
      if (b) return b;
      if (++extra > kMaxExtraEvictions) return ArenaBlock();
    }
    // While the arena still makes its pieces (common/buddy_arena.h), a
    // prefetch does not evict another prefetch nobody has read yet: in the
    // little memory made after a mount, a burst of lookups evicted its own
    // first keys before they were read (a first load prefetched each key
    // twice). The arena makes a next piece when it runs out, so the room
    // grows; once it is all made, plain LRU.
    auto keep = [&](const CachedChunk& c) {
      return c.state() == CachedChunk::State::kLoading ||
             (spare_unread && c.prefetched && !c.used.load(std::memory_order_relaxed));
    };
    while (it != lru_.begin() && keep(*slots_.find(*std::prev(it))->second.chunk)) --it;
    if (it == lru_.begin()) return ArenaBlock();  // nothing left to evict
    EraseLocked(slots_.find(*std::prev(it)));     // erases that entry only; `it` stays valid
  }
}

std::shared_ptr<CachedChunk> ChunkCache::StartLoad(uint64_t owner, uint64_t chunk,
                                                   uint64_t version, uint64_t capacity,
                                                   bool prefetch) {
  MutexLock l(mu_);
  auto it = slots_.find({owner, chunk});
  if (it != slots_.end()) {
    if (it->second.chunk->version == version) return nullptr;
    EraseLocked(it);  // an older version
  }
  if (capacity == 0 || capacity > BuddyArena::kMaxBlock) return nullptr;
  // Evicted entries that a reader still holds keep their blocks a while:
  // then there may be no room.
  ArenaBlock block = AllocateLocked(capacity, prefetch);
  if (!block) return nullptr;
  auto c = std::make_shared<CachedChunk>();
  c->data = std::move(block);
  c->capacity = capacity;
  c->version = version;
  c->prefetched = prefetch;
  if (prefetch) prefetched_.fetch_add(capacity, std::memory_order_relaxed);
  lru_.push_front({owner, chunk});
  slots_.emplace(Key{owner, chunk}, Slot{c, lru_.begin()});
  bytes_ += c->data.size();
  return c;
}

void ChunkCache::Erase(uint64_t owner, uint64_t chunk) {
  MutexLock l(mu_);
  auto it = slots_.find({owner, chunk});
  if (it != slots_.end()) EraseLocked(it);
}

void ChunkCache::EraseOwner(uint64_t owner) {
  MutexLock l(mu_);
  auto it = slots_.lower_bound({owner, 0});
  while (it != slots_.end() && it->first.first == owner) {
    auto next = std::next(it);
    EraseLocked(it);
    it = next;
  }
}

void ChunkCache::Clear() {
  MutexLock l(mu_);
  while (!slots_.empty()) EraseLocked(slots_.begin());
}

uint64_t ChunkCache::unused_prefetch_bytes() const {
  uint64_t p = prefetched_.load(), u = prefetch_used_.load(), w = wasted_.load();
  return p > u + w ? p - u - w : 0;
}

CacheCounters ChunkCache::counters() const {
  CacheCounters c;
  c.hits = hits_.load();
  c.misses = misses_.load();
  c.prefetched_bytes = prefetched_.load();
  c.prefetch_used_bytes = prefetch_used_.load();
  c.prefetch_wasted_bytes = wasted_.load();
  c.budget = budget_;
  MutexLock l(mu_);
  c.bytes = bytes_;
  c.entries = slots_.size();
  return c;
}

}  // namespace kvfs::fs
