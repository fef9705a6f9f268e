#include "common/large_buffer.h"

#include <sys/mman.h>

#include <cstdlib>

#include <mutex>
#include <unordered_map>
#include <vector>

namespace kvfs {

namespace {

// Free mmap'd buffers by size, at most kMaxRecycledBytes in all.
struct FreeList {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<char*>> by_size;  // GUARDED_BY(mu)
  size_t bytes = 0;                                        // GUARDED_BY(mu)
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
  char* stale = nullptr;
  size_t stale_size = 0;
  {
    FreeList& fl = Recycled();
    std::lock_guard<std::mutex> l(fl.mu);
    auto it = fl.by_size.find(size);
    if (it != fl.by_size.end() && !it->second.empty()) {
      char* p = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) fl.by_size.erase(it);
      fl.bytes -= size;
      return LargeBuffer(p, size);
    }
    // A miss while the list is over half full: the sizes it holds are
    // likely of an earlier workload; give one back so the list follows.
    if (fl.bytes > kMaxRecycledBytes / 2 && !fl.by_size.empty()) {
      // (Every vector in the map is non-empty; `size` has none.)
      auto victim = fl.by_size.begin();
      stale = victim->second.back();
      stale_size = victim->first;
      victim->second.pop_back();
      if (victim->second.empty()) fl.by_size.erase(victim);
      fl.bytes -= stale_size;
    }
  }
  if (stale) munmap(stale, stale_size);
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
  {
    FreeList& fl = Recycled();
    std::lock_guard<std::mutex> l(fl.mu);
    if (fl.bytes + size_ <= kMaxRecycledBytes) {
      fl.by_size[size_].push_back(std::exchange(data_, nullptr));
      fl.bytes += size_;
      return;
    }
  }
  munmap(std::exchange(data_, nullptr), size_);
}

}  // namespace kvfs
