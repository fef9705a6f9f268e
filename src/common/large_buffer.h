// LargeBuffer: kBlockSize-aligned memory for file data (RAM cache entries,
// bounce buffers), from mmap rather than malloc.
//
// Why: glibc keeps freed large blocks in per-thread arenas, and kvfs
// allocates data buffers on one thread and frees them on another; with
// aligned_alloc the daemon's RSS grew to several times its cache bound
// (tests/integration/test_queue_depth.py). mmap'd memory goes back to the
// kernel when freed, except for up to kMaxRecycledBytes of freed buffers
// kept for reuse by an allocation of the same size: connectors use one
// chunk size, so a steady load reuses pages already faulted in instead of
// paying a fault and a zeroed page per 4 KiB for every buffer (14% of the
// daemon's CPU in a 256 KiB load loop, when only 1 MiB buffers were
// reused). Small buffers
// (below kHeapBytes: small files, lookup prefetches of them) come from
// malloc, where a syscall per buffer would cost more than the buffer.
//
// Thread safety: LargeBuffer objects are not shared; Allocate() and the
// destructor may run on any thread.
#pragma once

#include <cstddef>
#include <utility>

namespace kvfs {

class LargeBuffer {
 public:
  // Bytes of free buffers kept for reuse, at most (the fixed overhead).
  static constexpr size_t kMaxRecycledBytes = size_t{64} << 20;
  static constexpr size_t kHeapBytes = size_t{128} << 10;

  // `bytes` rounded up to 4096; an empty buffer (data() == nullptr) when
  // the kernel has no memory, or for 0 bytes.
  static LargeBuffer Allocate(size_t bytes);

  LargeBuffer() = default;
  LargeBuffer(LargeBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(o.size_) {}
  LargeBuffer& operator=(LargeBuffer&& o) noexcept {
    if (this != &o) {
      Release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = o.size_;
    }
    return *this;
  }
  LargeBuffer(const LargeBuffer&) = delete;
  LargeBuffer& operator=(const LargeBuffer&) = delete;
  ~LargeBuffer() { Release(); }

  char* data() const { return data_; }
  char* get() const { return data_; }
  size_t size() const { return size_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  LargeBuffer(char* data, size_t size) : data_(data), size_(size) {}
  void Release();

  char* data_ = nullptr;
  size_t size_ = 0;  // mapped bytes (a multiple of 4096)
};

}  // namespace kvfs
