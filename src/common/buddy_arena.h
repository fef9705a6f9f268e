// BuddyArena: one mmap'd region handed out in power-of-two blocks of 4 KiB
// to 1 MiB (a buddy allocator: a freed block merges with its free buddy, so
// memory that served one chunk size serves another later).
//
// Why: it is the RAM cache's memory (fs/chunk_cache.h). Being one region, it
// can have huge pages (MADV_HUGEPAGE) and the io engine can register it
// (IoEngine::RegisterRegion); on a VM, device reads into such memory ran
// 1.5-1.8x faster than into ordinary buffers.
//
// With a `on_made` hook, the region is made usable a piece (kPieceBytes) at
// a time, ahead of use, and blocks are handed out only from pieces whose
// pages exist: the first piece before Create returns, each next one on the
// arena's own thread as soon as a block of the piece before it is first
// handed out (the first 256 MiB, kMadeAtCreate, before Create returns); the hook then registers it (fs/cache_registrar.h). Making the
// pages of fresh memory is slow (64 MiB of huge pages: 64-160 ms on a VM,
// where the host backs guest memory on first touch), and a read that
// faulted them in itself waited that long: a cache being filled for the
// first time loaded at 200-600 MB/s where a warm one loads at 1.3-3 GB/s.
// Until the next piece is made, a full set of made pieces is full: the
// cache evicts and reuses what it has. A mount makes at most one piece it
// has not used, and the lowest free block is always handed out first, so
// use stays packed. Without a hook every block is usable at once, its
// pages made by its first use.
// Blocks are not zeroed: their bytes are whatever the last user left.
//
//   auto arena = BuddyArena::Create(1 << 30);
//   ArenaBlock b = (*arena)->Allocate(256 << 10);  // empty if none is free
//
// Thread safety: all methods are safe from any thread. A block returns
// itself when destroyed, on any thread; the arena must outlive its blocks.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
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
  // Made before Create returns (a mount answers): 0.2-0.9 s on the dev VM,
  // where a first load after mount (64 keys of 4 MiB) otherwise ran at
  // 0.3-1 GB/s for 3-4 GB/s warm.
  static constexpr size_t kMadeAtCreate = size_t{256} << 20;

  // Called once with each piece of the region, at most kPieceBytes, after
  // its pages were made and before a block in it is handed out: for the
  // first piece on the thread that calls Create, for the others on the
  // arena's thread. It should not wait long (it holds up the next piece).
  using PieceHook = std::function<void(const char* base, size_t len)>;

  // A region of `bytes` rounded down to whole kMaxBlock blocks (0: an arena
  // with no blocks). ENOMEM if it cannot be mapped. Pages are touched only
  // when used.
  //
  // With a hook, the pieces of the first `made_at_create` bytes (at least
  // one piece) are made before Create returns.
  static Result<std::unique_ptr<BuddyArena>> Create(size_t bytes, PieceHook on_made = nullptr,
                                                    size_t made_at_create = kMadeAtCreate);
  // REQUIRES: every block was destroyed. StopMaking()s.
  ~BuddyArena();
  // Ends the making of pieces (one under way finishes first, hook
  // included) and joins the arena's thread: no hook runs after it
  // returns. Call it before what the hook uses goes. Idempotent.
  void StopMaking();
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
  // Bytes of the pieces made so far (all of the region without a hook).
  size_t made_bytes() const;

 private:
  friend class ArenaBlock;
  BuddyArena(char* region, size_t bytes, PieceHook on_made);
  static int OrderOf(size_t bytes);
  void Free(char* data, int order);
  // Makes the pages of piece `piece` and calls the hook.
  void MakePiece(size_t piece);
  void MakeLoop();

  char* const region_;
  const size_t bytes_;
  const size_t pieces_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Offsets of the free blocks of each order.
  std::set<size_t> free_[kMaxOrder + 1];  // GUARDED_BY(mu_)
  size_t free_bytes_ = 0;                 // GUARDED_BY(mu_)
  const PieceHook on_made_;
  // Pieces [0, made_) are made; [made_, wanted_) are to be made next.
  size_t made_ = 0;    // GUARDED_BY(mu_)
  size_t wanted_ = 0;  // GUARDED_BY(mu_)
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::thread maker_;
};

}  // namespace kvfs
