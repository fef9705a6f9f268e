#include "common/buddy_arena.h"

#include <sys/mman.h>

#include <cerrno>
#include <string>

namespace kvfs {

ArenaBlock& ArenaBlock::operator=(ArenaBlock&& o) noexcept {
  if (this != &o) {
    Release();
    arena_ = std::exchange(o.arena_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    order_ = o.order_;
  }
  return *this;
}

size_t ArenaBlock::size() const { return arena_ == nullptr ? 0 : BuddyArena::kMinBlock << order_; }

void ArenaBlock::Release() {
  if (arena_ != nullptr) std::exchange(arena_, nullptr)->Free(data_, order_);
}

Result<std::unique_ptr<BuddyArena>> BuddyArena::Create(size_t bytes, PieceHook on_first_use) {
  bytes -= bytes % kMaxBlock;
  char* region = nullptr;
  if (bytes > 0) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return Status::Error(errno, "mapping a " + std::to_string(bytes) + "-byte cache arena");
    }
    // Fewer, larger pages: cheaper to pin and to map (best effort).
    madvise(p, bytes, MADV_HUGEPAGE);
    region = static_cast<char*>(p);
  }
  return std::unique_ptr<BuddyArena>(new BuddyArena(region, bytes, std::move(on_first_use)));
}

BuddyArena::BuddyArena(char* region, size_t bytes, PieceHook on_first_use)
    : region_(region),
      bytes_(bytes),
      on_first_use_(std::move(on_first_use)),
      piece_used_((bytes + kPieceBytes - 1) / kPieceBytes, false) {
  for (size_t off = 0; off < bytes; off += kMaxBlock) free_[kMaxOrder].insert(off);
  free_bytes_ = bytes;
  std::lock_guard<std::mutex> l(mu_);
  PrepareLocked(0);
}

void BuddyArena::PrepareLocked(size_t piece) {
  if (piece >= piece_used_.size() || piece_used_[piece]) return;
  piece_used_[piece] = true;
  const size_t start = piece * kPieceBytes;
  if (on_first_use_) on_first_use_(region_ + start, std::min(kPieceBytes, bytes_ - start));
}

BuddyArena::~BuddyArena() {
  if (region_ != nullptr) munmap(region_, bytes_);
}

int BuddyArena::OrderOf(size_t bytes) {
  int order = 0;
  while ((kMinBlock << order) < bytes) ++order;
  return order;
}

size_t BuddyArena::BlockBytes(size_t bytes) { return kMinBlock << OrderOf(bytes); }

ArenaBlock BuddyArena::Allocate(size_t bytes) {
  if (bytes == 0 || bytes > kMaxBlock) return ArenaBlock();
  const int order = OrderOf(bytes);
  std::lock_guard<std::mutex> l(mu_);
  int k = order;
  while (k <= kMaxOrder && free_[k].empty()) ++k;
  if (k > kMaxOrder) return ArenaBlock();
  // The lowest free block: allocations stay packed at the region's start.
  size_t off = *free_[k].begin();
  free_[k].erase(free_[k].begin());
  while (k > order) {  // split, keeping the lower half
    --k;
    free_[k].insert(off + (kMinBlock << k));
  }
  free_bytes_ -= kMinBlock << order;
  const size_t piece = off / kPieceBytes;  // a block never spans two
  PrepareLocked(piece);
  // A piece ahead: the next piece's pages are made (and pinned) before a
  // block in it is handed out, not by the first read into it; once this
  // piece is half used, so that a mount that reads little makes no more.
  if (off % kPieceBytes >= kPieceBytes / 2) PrepareLocked(piece + 1);
  return ArenaBlock(this, region_ + off, order);
}

void BuddyArena::Free(char* data, int order) {
  size_t off = static_cast<size_t>(data - region_);
  std::lock_guard<std::mutex> l(mu_);
  free_bytes_ += kMinBlock << order;
  while (order < kMaxOrder) {
    const size_t buddy = off ^ (kMinBlock << order);
    auto it = free_[order].find(buddy);
    if (it == free_[order].end()) break;
    free_[order].erase(it);
    off = std::min(off, buddy);
    ++order;
  }
  free_[order].insert(off);
}

size_t BuddyArena::free_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return free_bytes_;
}

}  // namespace kvfs
