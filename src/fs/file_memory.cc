#include "fs/file_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace kvfs::fs {

// ------------------------------------------------------------ file memory

FileMemory::FileMemory(std::unique_ptr<MemoryBlock> block, bool zeroed, MemoryVersion version,
                       std::shared_ptr<MemoryPool> pool)
    : pool_(std::move(pool)),
      fd_(block->fd),
      data_(block->data),
      mapped_(block->mapped),
      zeroed_(zeroed),
      version_(std::move(version)),
      block_(std::move(block)) {}

FileMemory::~FileMemory() {
  MutexLock l(mu_);
  if (pool_) pool_->Give(std::move(block_));
}

bool FileMemory::WaitIfLoading(std::function<void(bool ok)> fn) {
  MutexLock l(mu_);
  if (state_ != State::kLoading) return false;
  waiters_.push_back(std::move(fn));
  return true;
}

FileMemory::State FileMemory::state() const {
  MutexLock l(mu_);
  return state_;
}

bool FileMemory::has_waiters() const {
  MutexLock l(mu_);
  return state_ == State::kLoading && !waiters_.empty();
}

void FileMemory::Finish(bool ok) {
  // Pages past the size were read only because the device reads whole
  // blocks; the kernel must see exactly the file.
  if (ok && version_.size < mapped_ && ftruncate(fd_, static_cast<off_t>(version_.size)) != 0) {
    ok = false;
  }
  if (!ok) (void)ftruncate(fd_, 0);  // nothing will read it: its pages go back
  std::vector<std::function<void(bool)>> waiters;
  {
    MutexLock l(mu_);
    state_ = ok ? State::kReady : State::kFailed;
    waiters.swap(waiters_);
  }
  for (auto& w : waiters) w(ok);
}

int FileMemory::ExportId(const std::function<int(int fd)>& make,
                         std::function<void(int id)> release) {
  MutexLock l(mu_);
  if (block_->export_id > 0) return block_->export_id;
  const int id = make(fd_);
  if (id > 0) {
    block_->export_id = id;
    block_->export_release = std::move(release);
  }
  return id;
}

int FileMemory::export_id() const {
  MutexLock l(mu_);
  return block_->export_id;
}

// ------------------------------------------------------------ the cache

FileMemoryCache::FileMemoryCache(uint64_t budget_bytes)
    : budget_(budget_bytes),
      pool_(std::make_shared<MemoryPool>(budget_bytes)) {
  MutexLock l(mu_);
  LimitPoolLocked();
}

void FileMemoryCache::LimitPoolLocked() {
  // Nothing is kept beyond the limit when it shrinks (entries grew), so
  // no block is freed here, under the lock: Insert trims the pool first.
  std::vector<std::unique_ptr<MemoryBlock>> none = pool_->SetLimit(budget_ - bytes_);
  (void)none;
}

Result<std::shared_ptr<FileMemory>> FileMemoryCache::Make(MemoryVersion version,
                                                         uint64_t map_bytes, bool prefetch) {
  std::unique_ptr<MemoryBlock> b = pool_->Take(map_bytes);
  if (!b) {
    // A full cache: the entries Insert would evict for this one go now, so
    // that the memory of one of them (of this size, reached by no client)
    // is this load's instead of being freed.
    std::vector<std::shared_ptr<FileMemory>> gone;
    {
      MutexLock l(mu_);
      EvictLocked(map_bytes, prefetch, &gone);
    }
    if (!gone.empty()) {
      gone.clear();  // their blocks go to the pool, where no one else holds them
      b = pool_->Take(map_bytes);
    }
  }
  const bool zeroed = !b;
  if (zeroed) {
    KVFS_ASSIGN_OR_RETURN(b, MemoryBlock::Make(map_bytes));
  }
  return std::make_shared<FileMemory>(std::move(b), zeroed, std::move(version), pool_);
}

std::shared_ptr<FileMemory> FileMemoryCache::Get(uint64_t owner) {
  MutexLock l(mu_);
  auto it = slots_.find(owner);
  if (it == slots_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.memory;
}

void FileMemoryCache::EvictLocked(uint64_t need, bool prefetch,
                                  std::vector<std::shared_ptr<FileMemory>>* gone) {
  // Oldest first; entries that opens use or that are still loading stay.
  auto it = lru_.end();
  while (bytes_ + need > budget_ && it != lru_.begin()) {
    --it;
    auto s = slots_.find(*it);
    const FileMemory& v = *s->second.memory;
    if (v.serves_opens() || v.awaited() || v.state() == FileMemory::State::kLoading) {
      continue;
    }
    // A speculative load is not pushed out by another speculative load
    // before it was used (the loop would undo its own prefetch).
    if (prefetch && v.unused_prefetch.load()) continue;
    auto next = std::next(it);
    EraseLocked(s, gone);
    dropped_.fetch_add(1, std::memory_order_relaxed);
    it = next;
  }
}

bool FileMemoryCache::Insert(uint64_t owner, const std::shared_ptr<FileMemory>& m,
                             bool prefetch) {
  std::vector<std::shared_ptr<FileMemory>> gone;  // freed after the lock
  std::vector<std::unique_ptr<MemoryBlock>> surplus;  // the same
  bool ok = false;
  {
    MutexLock l(mu_);
    auto same = slots_.find(owner);
    if (same != slots_.end()) {
      // Opens served from the entry read and write it: it stays the
      // file's memory until the last of them is released.
      if (same->second.memory->serves_opens()) {
        no_room_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      EraseLocked(same, &gone);
    }
    EvictLocked(m->bytes(), prefetch, &gone);
    if (bytes_ + m->bytes() <= budget_) {
      lru_.push_front(owner);
      slots_.emplace(owner, Slot{m, lru_.begin()});
      bytes_ += m->bytes();
      surplus = pool_->SetLimit(budget_ - bytes_);
      m->unused_prefetch.store(prefetch);
      if (prefetch) {
        unused_prefetch_bytes_.fetch_add(m->bytes(), std::memory_order_relaxed);
        prefetched_.fetch_add(m->bytes(), std::memory_order_relaxed);
      }
      loads_.fetch_add(1, std::memory_order_relaxed);
      load_bytes_.fetch_add(m->version().size, std::memory_order_relaxed);
      ok = true;
    } else {
      no_room_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return ok;
}

void FileMemoryCache::EraseLocked(std::unordered_map<uint64_t, Slot>::iterator it,
                                  std::vector<std::shared_ptr<FileMemory>>* gone) {
  FileMemory& m = *it->second.memory;
  if (m.unused_prefetch.exchange(false)) {
    unused_prefetch_bytes_.fetch_sub(m.bytes(), std::memory_order_relaxed);
    wasted_.fetch_add(m.bytes(), std::memory_order_relaxed);
  }
  bytes_ -= m.bytes();
  LimitPoolLocked();  // before `m` may go to the pool
  lru_.erase(it->second.lru);
  gone->push_back(std::move(it->second.memory));
  slots_.erase(it);
}

void FileMemoryCache::Erase(uint64_t owner, const FileMemory* m) {
  std::vector<std::shared_ptr<FileMemory>> gone;
  MutexLock l(mu_);
  auto it = slots_.find(owner);
  if (it == slots_.end()) return;
  if (m != nullptr && it->second.memory.get() != m) return;
  if (it->second.memory->serves_opens() || it->second.memory->awaited()) return;
  EraseLocked(it, &gone);
}

void FileMemoryCache::Clear() {
  std::vector<std::shared_ptr<FileMemory>> gone;
  MutexLock l(mu_);
  for (auto it = slots_.begin(); it != slots_.end();) {
    auto next = std::next(it);
    if (!it->second.memory->serves_opens()) EraseLocked(it, &gone);
    it = next;
  }
}

void FileMemoryCache::MarkUsed(FileMemory& m) {
  hits_.fetch_add(1, std::memory_order_relaxed);
  if (!m.unused_prefetch.load(std::memory_order_relaxed)) return;
  MutexLock l(mu_);  // orders with EraseLocked's exchange
  if (m.unused_prefetch.exchange(false)) {
    unused_prefetch_bytes_.fetch_sub(m.bytes(), std::memory_order_relaxed);
    prefetch_used_.fetch_add(m.bytes(), std::memory_order_relaxed);
  }
}

FileMemoryCounters FileMemoryCache::counters() const {
  FileMemoryCounters c;
  c.budget_bytes = budget_;
  {
    MutexLock l(mu_);
    c.bytes = bytes_;
    c.files = slots_.size();
  }
  c.loads = loads_.load(std::memory_order_relaxed);
  c.load_bytes = load_bytes_.load(std::memory_order_relaxed);
  c.dropped = dropped_.load(std::memory_order_relaxed);
  c.no_room = no_room_.load(std::memory_order_relaxed);
  c.unused_prefetch_bytes = unused_prefetch_bytes();
  c.served_opens = served_opens_.load(std::memory_order_relaxed);
  c.hits = hits_.load(std::memory_order_relaxed);
  c.prefetched_bytes = prefetched_.load(std::memory_order_relaxed);
  c.prefetch_used_bytes = prefetch_used_.load(std::memory_order_relaxed);
  c.prefetch_wasted_bytes = wasted_.load(std::memory_order_relaxed);
  c.served_bytes = served_bytes_.load(std::memory_order_relaxed);
  c.kept_bytes = pool_->bytes();
  c.reused = pool_->reused();
  c.made_ahead = pool_->made_ahead();
  return c;
}

}  // namespace kvfs::fs
