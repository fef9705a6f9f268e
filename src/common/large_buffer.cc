#include "common/large_buffer.h"

#include <sys/mman.h>

#include <cstdlib>

#include <mutex>
#include <vector>

namespace kvfs {

namespace {

struct FreeList {
  std::mutex mu;
  std::vector<char*> buffers;  // GUARDED_BY(mu); each kRecycledBytes
};

FreeList& Recycled() {
  static FreeList* list = new FreeList;  // never destroyed: used until exit
  return *list;
}

}  // namespace

LargeBuffer LargeBuffer::Allocate(size_t bytes) {
  if (bytes == 0) return {};
  const size_t size = (bytes + 4095) & ~size_t{4095};
  if (size < kHeapBytes) {
    void* p = std::aligned_alloc(4096, size);
    return p ? LargeBuffer(static_cast<char*>(p), size) : LargeBuffer();
  }
  if (size == kRecycledBytes) {
    FreeList& fl = Recycled();
    std::lock_guard<std::mutex> l(fl.mu);
    if (!fl.buffers.empty()) {
      char* p = fl.buffers.back();
      fl.buffers.pop_back();
      return LargeBuffer(p, size);
    }
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return {};
  return LargeBuffer(static_cast<char*>(p), size);
}

void LargeBuffer::Release() {
  if (data_ == nullptr) return;
  if (size_ < kHeapBytes) {
    std::free(std::exchange(data_, nullptr));
    return;
  }
  if (size_ == kRecycledBytes) {
    FreeList& fl = Recycled();
    std::lock_guard<std::mutex> l(fl.mu);
    if (fl.buffers.size() < kMaxRecycled) {
      fl.buffers.push_back(std::exchange(data_, nullptr));
      return;
    }
  }
  munmap(std::exchange(data_, nullptr), size_);
}

}  // namespace kvfs
