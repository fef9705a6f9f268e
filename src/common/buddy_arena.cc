#include "common/buddy_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <system_error>

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

Result<std::unique_ptr<BuddyArena>> BuddyArena::Create(size_t bytes, PieceHook on_made,
                                                      size_t made_at_create) {
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
  std::unique_ptr<BuddyArena> arena(new BuddyArena(region, bytes, std::move(on_made)));
  if (arena->on_made_ && arena->pieces_ > 0) {
    // The first pieces before the mount answers, two at a time (making huge
    // pages is compaction: CPU-bound), so that the first loads after a
    // mount find pages.
    const size_t n = std::clamp<size_t>(made_at_create / kPieceBytes, 1, arena->pieces_);
    std::thread other;
    try {
      if (n > 1) {
        other = std::thread([a = arena.get(), n] {
          for (size_t p = 1; p < n; p += 2) a->MakePiece(p);
        });
      }
    } catch (const std::system_error&) {
      for (size_t p = 1; p < n; p += 2) arena->MakePiece(p);  // no thread: here
    }
    for (size_t p = 0; p < n; p += 2) arena->MakePiece(p);
    if (other.joinable()) other.join();
    std::lock_guard<std::mutex> l(arena->mu_);
    arena->made_ = n;
    arena->wanted_ = n;
  }
  return arena;
}

BuddyArena::BuddyArena(char* region, size_t bytes, PieceHook on_made)
    : region_(region),
      bytes_(bytes),
      pieces_((bytes + kPieceBytes - 1) / kPieceBytes),
      on_made_(std::move(on_made)) {
  for (size_t off = 0; off < bytes; off += kMaxBlock) free_[kMaxOrder].insert(off);
  free_bytes_ = bytes;
  if (!on_made_) {
    made_ = wanted_ = pieces_;
  } else if (pieces_ > 1) {
    maker_ = std::thread([this] { MakeLoop(); });
  }
}

void BuddyArena::MakePiece(size_t piece) {
  char* base = region_ + piece * kPieceBytes;
  const size_t len = std::min(kPieceBytes, bytes_ - piece * kPieceBytes);
  // No block of the piece has been handed out: its bytes are nobody's.
  // Before Linux 5.14 there is no MADV_POPULATE_WRITE: a write per page.
  if (madvise(base, len, MADV_POPULATE_WRITE) != 0) {
    for (size_t off = 0; off < len; off += 4096) static_cast<volatile char*>(base)[off] = 0;
  }
  on_made_(base, len);
}

void BuddyArena::MakeLoop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return stop_ || wanted_ > made_; });
    if (stop_) return;
    const size_t piece = made_;
    l.unlock();
    MakePiece(piece);
    l.lock();
    made_ = piece + 1;
  }
}

void BuddyArena::StopMaking() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (maker_.joinable()) maker_.join();
}

BuddyArena::~BuddyArena() {
  StopMaking();
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
  // The lowest free block of the smallest order that has one in the made
  // pieces (a block never spans two pieces).
  const size_t made_end = std::min(bytes_, made_ * kPieceBytes);
  int k = order;
  while (k <= kMaxOrder && (free_[k].empty() || *free_[k].begin() >= made_end)) ++k;
  if (k > kMaxOrder) {
    // Full up to the pieces made: the next one is under way if there is one.
    if (wanted_ < pieces_ && wanted_ <= made_) {
      wanted_ = made_ + 1;
      cv_.notify_one();
    }
    return ArenaBlock();
  }
  size_t off = *free_[k].begin();
  free_[k].erase(free_[k].begin());
  while (k > order) {  // split, keeping the lower half
    --k;
    free_[k].insert(off + (kMinBlock << k));
  }
  free_bytes_ -= kMinBlock << order;
  // A piece ahead: the next piece is made as soon as this one is used, not
  // by the first read into it.
  const size_t piece = off / kPieceBytes;
  if (piece + 2 > wanted_ && piece + 2 <= pieces_) {
    wanted_ = piece + 2;
    cv_.notify_one();
  }
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

size_t BuddyArena::made_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return std::min(bytes_, made_ * kPieceBytes);
}

}  // namespace kvfs
