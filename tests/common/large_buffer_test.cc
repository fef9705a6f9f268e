#include "common/large_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

namespace kvfs {
namespace {

TEST(LargeBufferTest, SizesRoundUpTo4096AndAreAligned) {
  for (size_t n : {size_t{1}, size_t{4096}, size_t{5000}, size_t{256} << 10, (size_t{1} << 20) + 1}) {
    LargeBuffer b = LargeBuffer::Allocate(n);
    ASSERT_TRUE(b) << n;
    EXPECT_EQ(b.size(), (n + 4095) / 4096 * 4096);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 4096, 0u);
    std::memset(b.get(), 0xab, b.size());  // all of it is writable
  }
  EXPECT_FALSE(LargeBuffer::Allocate(0));
}

// Whether `b` is a recycled buffer: freed buffers are marked, and fresh
// mmap'd memory reads as zeros (the kernel may hand out the same addresses
// again, so addresses tell nothing).
bool Recycled(const LargeBuffer& b) { return b.get()[0] == 0x5a && b.get()[b.size() - 1] == 0x5a; }

void MarkAndFree(std::vector<LargeBuffer>& v) {
  for (auto& b : v) {
    b.get()[0] = 0x5a;
    b.get()[b.size() - 1] = 0x5a;
  }
  v.clear();
}

// A steady load allocates and frees buffers of one chunk size: they must be
// reused (pages already faulted in), whatever that size is.
TEST(LargeBufferTest, FreedBuffersAreReusedBySameSizeAllocations) {
  for (size_t size : {size_t{256} << 10, size_t{260} << 10, size_t{1} << 20}) {
    std::vector<LargeBuffer> v;
    for (int k = 0; k < 8; ++k) v.push_back(LargeBuffer::Allocate(size));
    MarkAndFree(v);
    for (int k = 0; k < 8; ++k) v.push_back(LargeBuffer::Allocate(size));
    for (auto& b : v) EXPECT_TRUE(Recycled(b)) << size;
    for (auto& b : v) std::memset(b.get(), 0, b.size());  // unmarked for the next test
  }
}

// What is kept for reuse is bounded: after freeing twice the bound, a burst
// of allocations gets at most kMaxRecycledBytes of recycled buffers.
TEST(LargeBufferTest, RecycledBytesStayWithinTheBound) {
  const size_t size = size_t{512} << 10;
  const size_t n = 2 * LargeBuffer::kMaxRecycledBytes / size;
  std::vector<LargeBuffer> v;
  for (size_t k = 0; k < n; ++k) v.push_back(LargeBuffer::Allocate(size));
  MarkAndFree(v);
  size_t reused = 0;
  for (size_t k = 0; k < n; ++k) {
    v.push_back(LargeBuffer::Allocate(size));
    reused += Recycled(v.back());
  }
  EXPECT_GT(reused, 0u);
  EXPECT_LE(reused * size, LargeBuffer::kMaxRecycledBytes);
}

}  // namespace
}  // namespace kvfs
