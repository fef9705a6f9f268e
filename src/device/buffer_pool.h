// BufferPool: a fixed region of kBlockSize-aligned memory cut into equal
// slots. The IoEngine registers the region with every ring, so I/O on a slot
// skips the per-I/O page pinning of ordinary buffers. The pool size is the
// bound on staged (dirty) data: Acquire() blocks while every slot is out.
//
// Thread safety: all methods are safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"

namespace kvfs::device {

class BufferPool;

// One slot; returns itself to the pool when destroyed. Move-only.
class PoolBuffer {
 public:
  PoolBuffer() = default;
  PoolBuffer(PoolBuffer&& o) noexcept;
  PoolBuffer& operator=(PoolBuffer&& o) noexcept;
  ~PoolBuffer();

  char* data() const { return data_; }
  size_t size() const { return size_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  friend class BufferPool;
  PoolBuffer(BufferPool* pool, char* data, size_t size) : pool_(pool), data_(data), size_(size) {}
  BufferPool* pool_ = nullptr;
  char* data_ = nullptr;
  size_t size_ = 0;
};

class BufferPool {
 public:
  // total_bytes is rounded down to a multiple of slot_bytes (>= 1 slot).
  // slot_bytes must be a non-zero multiple of kBlockSize (EINVAL otherwise).
  // ENOMEM if the region cannot be allocated. The region is populated up
  // front so the first I/O on a slot does not fault pages in.
  static Result<std::unique_ptr<BufferPool>> Create(size_t total_bytes, size_t slot_bytes);
  ~BufferPool();  // REQUIRES: every PoolBuffer has been returned.

  // Blocks until a slot is free. Do not call from an engine callback while
  // holding the only path by which slots come back (it would wait forever).
  PoolBuffer Acquire();
  // An empty PoolBuffer if none is free.
  PoolBuffer TryAcquire();

  size_t slot_bytes() const { return slot_bytes_; }
  size_t slot_count() const { return slots_; }
  size_t free_slots() const;
  // Callers blocked in Acquire() now (so a test sees a waiter without
  // sleeping).
  size_t waiters() const;
  char* region() const { return region_; }
  size_t region_bytes() const { return slot_bytes_ * slots_; }
  bool Contains(const void* p, size_t len) const {
    auto* c = static_cast<const char*>(p);
    return c >= region_ && c + len <= region_ + region_bytes();
  }

 private:
  friend class PoolBuffer;
  BufferPool(void* map_base, size_t map_bytes, char* region, size_t slot_bytes, size_t slots);
  void Release(char* data);

  void* const map_base_;  // the whole mapping; region_ is inside it
  const size_t map_bytes_;
  char* const region_;
  const size_t slot_bytes_;
  const size_t slots_;
  mutable Mutex mu_;
  CondVar cv_;
  std::vector<char*> free_ GUARDED_BY(mu_);
  size_t waiters_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvfs::device
