#include "device/buffer_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <string>
#include <utility>

#include "common/format.h"

namespace kvfs::device {

namespace {
// MADV_POPULATE_WRITE (Linux 5.14); older headers lack the name.
constexpr int kMadvPopulateWrite = 23;
}  // namespace

PoolBuffer::PoolBuffer(PoolBuffer&& o) noexcept
    : pool_(std::exchange(o.pool_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

PoolBuffer& PoolBuffer::operator=(PoolBuffer&& o) noexcept {
  if (this != &o) {
    if (pool_ != nullptr) pool_->Release(data_);
    pool_ = std::exchange(o.pool_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

PoolBuffer::~PoolBuffer() {
  if (pool_ != nullptr) pool_->Release(data_);
}

Result<std::unique_ptr<BufferPool>> BufferPool::Create(size_t total_bytes, size_t slot_bytes) {
  if (slot_bytes == 0 || slot_bytes % kBlockSize != 0) {
    return Status::Error(EINVAL, "buffer pool: slot size " + std::to_string(slot_bytes) +
                                     " is not a positive multiple of " +
                                     std::to_string(kBlockSize));
  }
  size_t slots = total_bytes / slot_bytes;
  if (slots == 0) slots = 1;
  size_t bytes = slots * slot_bytes;
  // mmap rather than malloc: page aligned and returned to the kernel on
  // destruction. The region starts on a 2 MiB boundary and asks for
  // transparent huge pages: a slot then spans few physically contiguous
  // runs, so a 1 MiB command is one device segment instead of 256 pages
  // (virtio and NVMe cap segments per request), and registration pins
  // fewer pages. Falls back silently to small pages.
  constexpr size_t kHugePage = size_t{2} << 20;
  size_t map_bytes = bytes + kHugePage;
  void* base = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
  if (base == MAP_FAILED) {
    return Status::Error(ENOMEM, "buffer pool: cannot map " + std::to_string(bytes) + " bytes");
  }
  char* region = reinterpret_cast<char*>(AlignUp(reinterpret_cast<uintptr_t>(base), kHugePage));
  ::madvise(region, bytes, MADV_HUGEPAGE);  // advisory; errors change nothing
  // Fault every page in now rather than on the first I/O (registration
  // would pin them anyway).
  if (::madvise(region, bytes, kMadvPopulateWrite) != 0) {
    for (size_t off = 0; off < bytes; off += 4096) region[off] = 0;
  }
  return std::unique_ptr<BufferPool>(
      new BufferPool(base, map_bytes, region, slot_bytes, slots));
}

BufferPool::BufferPool(void* map_base, size_t map_bytes, char* region, size_t slot_bytes,
                       size_t slots)
    : map_base_(map_base),
      map_bytes_(map_bytes),
      region_(region),
      slot_bytes_(slot_bytes),
      slots_(slots) {
  free_.reserve(slots);
  // Reverse so that Acquire() (pop_back) hands out the lowest slot first.
  for (size_t i = slots; i-- > 0;) free_.push_back(region_ + i * slot_bytes_);
}

BufferPool::~BufferPool() { ::munmap(map_base_, map_bytes_); }

PoolBuffer BufferPool::Acquire() {
  MutexLock l(mu_);
  ++waiters_;
  while (free_.empty()) cv_.Wait(l);
  --waiters_;
  char* d = free_.back();
  free_.pop_back();
  return PoolBuffer(this, d, slot_bytes_);
}

PoolBuffer BufferPool::TryAcquire() {
  MutexLock l(mu_);
  if (free_.empty()) return PoolBuffer();
  char* d = free_.back();
  free_.pop_back();
  return PoolBuffer(this, d, slot_bytes_);
}

size_t BufferPool::free_slots() const {
  MutexLock l(mu_);
  return free_.size();
}

size_t BufferPool::waiters() const {
  MutexLock l(mu_);
  return waiters_;
}

void BufferPool::Release(char* data) {
  {
    MutexLock l(mu_);
    free_.push_back(data);
  }
  cv_.NotifyOne();
}

}  // namespace kvfs::device
