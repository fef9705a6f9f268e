// BuddyArena: one mmap'd region handed out in power-of-two blocks of 4 KiB
// to 1 MiB (a buddy allocator: a freed block merges with its free buddy, so
// memory that served one chunk size serves another later).
//
// Why: it is the RAM cache's memory (fs/chunk_cache.h). Being one region, it
// can have huge pages (MADV_HUGEPAGE) and the io engine can register it
// (IoEngine::RegisterRegion); on a VM, device reads into such memory ran
// 1.5-1.8x faster than into ordinary buffers. Registering pins memory, so
// it happens a piece (kPieceBytes) at a time, ahead of use: the first piece
// when the arena is made, each next one when a block in the second half of
// the one before it is first handed out (`on_first_use`). A mount pins at
// most one piece it has not used, and the lowest free block is always
// handed out first, so use stays packed. Ahead, because the first read
// into fresh MADV_HUGEPAGE memory waited 9-80 ms for its pages to be made.
// Blocks are not zeroed: their bytes are whatever the last user left.
//
//   auto arena = BuddyArena::Create(1 << 30);
//   ArenaBlock b = (*arena)->Allocate(256 << 10);  // empty if none is free
//
// Thread safety: all methods are safe from any thread. A block returns
// itself when destroyed, on any thread; the arena must outlive its blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kvfs {

class BuddyArena;

// One block; move-only.
class ArenaBlock {
 public:
  ArenaBlock() = default;
  ArenaBlock(ArenaBlock&& o) noexcept
      : arena_(std::exchange(o.arena_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        order_(o.order_) {}
  ArenaBlock& operator=(ArenaBlock&& o) noexcept;
  ArenaBlock(const ArenaBlock&) = delete;
  ArenaBlock& operator=(const ArenaBlock&) = delete;
  ~ArenaBlock() { Release(); }

  char* get() const { return data_; }
  size_t size() const;
  explicit operator bool() const { return arena_ != nullptr; }

 private:
  friend class BuddyArena;
  ArenaBlock(BuddyArena* arena, char* data, int order) : arena_(arena), data_(data), order_(order) {}
  void Release();

  BuddyArena* arena_ = nullptr;
  char* data_ = nullptr;
  int order_ = 0;
};

class BuddyArena {
 public:
  static constexpr size_t kMinBlock = size_t{4} << 10;
  static constexpr int kMaxOrder = 8;  // kMinBlock << kMaxOrder == 1 MiB
  static constexpr size_t kMaxBlock = kMinBlock << kMaxOrder;
  static constexpr size_t kPieceBytes = size_t{64} << 20;

  // Called once with each piece of the region, at most kPieceBytes: the
  // first from Create, each other when a block in the second half of the
  // piece before it is first handed out. Under the arena's lock, so it
  // should only queue the work (fs/cache_registrar.h).
  using PieceHook = std::function<void(const char* base, size_t len)>;

  // A region of `bytes` rounded down to whole kMaxBlock blocks (0: an arena
  // with no blocks). ENOMEM if it cannot be mapped. Pages are touched only
  // when used.
  static Result<std::unique_ptr<BuddyArena>> Create(size_t bytes, PieceHook on_first_use = nullptr);
  // REQUIRES: every block was destroyed.
  ~BuddyArena();
  BuddyArena(const BuddyArena&) = delete;
  BuddyArena& operator=(const BuddyArena&) = delete;

  // The size of the block Allocate(bytes) takes: `bytes` rounded up to a
  // power of two, at least kMinBlock. REQUIRES: 0 < bytes <= kMaxBlock.
  static size_t BlockBytes(size_t bytes);
  // A block of BlockBytes(bytes), aligned to its size; empty when no block
  // that large is free, or when bytes is 0 or above kMaxBlock.
  ArenaBlock Allocate(size_t bytes);

  const char* region() const { return region_; }
  size_t region_bytes() const { return bytes_; }
  size_t free_bytes() const;

 private:
  friend class ArenaBlock;
  BuddyArena(char* region, size_t bytes, PieceHook on_first_use);
  static int OrderOf(size_t bytes);
  void Free(char* data, int order);
  // Calls on_first_use_ for `piece` unless it was called or there is no
  // such piece.
  void PrepareLocked(size_t piece);  // REQUIRES: mu_ held

  char* const region_;
  const size_t bytes_;
  mutable std::mutex mu_;
  // Offsets of the free blocks of each order.
  std::set<size_t> free_[kMaxOrder + 1];  // GUARDED_BY(mu_)
  size_t free_bytes_ = 0;                 // GUARDED_BY(mu_)
  const PieceHook on_first_use_;
  std::vector<bool> piece_used_;  // GUARDED_BY(mu_)
};

}  // namespace kvfs
