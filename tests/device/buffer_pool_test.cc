#include "device/buffer_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <vector>
#include <thread>

#include "common/format.h"

namespace kvfs::device {
namespace {

TEST(BufferPool, SlotsAreAlignedDisjointAndInsideTheRegion) {
  auto pool = BufferPool::Create(10 * 8192 + 100, 8192);
  ASSERT_TRUE(pool.ok());
  BufferPool& p = **pool;
  EXPECT_EQ(p.slot_count(), 10u);
  EXPECT_EQ(p.region_bytes(), 10u * 8192);
  std::vector<PoolBuffer> bufs;
  for (int i = 0; i < 10; ++i) bufs.push_back(p.Acquire());
  EXPECT_EQ(p.free_slots(), 0u);
  EXPECT_FALSE(p.TryAcquire());
  std::set<char*> seen;
  for (auto& b : bufs) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kBlockSize, 0u);
    EXPECT_EQ(b.size(), 8192u);
    EXPECT_TRUE(p.Contains(b.data(), b.size()));
    EXPECT_TRUE(seen.insert(b.data()).second);
  }
  EXPECT_FALSE(p.Contains(p.region() + p.region_bytes() - 4096, 8192));
  bufs.clear();
  EXPECT_EQ(p.free_slots(), 10u);
}

TEST(BufferPool, AtLeastOneSlotAndAlignedSlotSize) {
  auto one = BufferPool::Create(100, 4096);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)->slot_count(), 1u);
  EXPECT_EQ(BufferPool::Create(1 << 20, 1000).status().code(), EINVAL);
  EXPECT_EQ(BufferPool::Create(1 << 20, 0).status().code(), EINVAL);
}

TEST(BufferPool, MovedBufferReturnsItsSlotOnce) {
  auto pool = BufferPool::Create(2 * 4096, 4096);
  ASSERT_TRUE(pool.ok());
  PoolBuffer a = (*pool)->Acquire();
  PoolBuffer b = std::move(a);
  EXPECT_FALSE(a);
  EXPECT_TRUE(b);
  EXPECT_EQ((*pool)->free_slots(), 1u);
  PoolBuffer c = (*pool)->Acquire();
  c = std::move(b);  // c's old slot goes back
  EXPECT_EQ((*pool)->free_slots(), 1u);
  c = PoolBuffer();
  EXPECT_EQ((*pool)->free_slots(), 2u);
}

TEST(BufferPool, AcquireBlocksUntilASlotIsReturned) {
  auto pool = BufferPool::Create(4096, 4096);
  ASSERT_TRUE(pool.ok());
  PoolBuffer held = (*pool)->Acquire();
  std::atomic<bool> got{false};
  std::thread t([&] {
    PoolBuffer b = (*pool)->Acquire();
    got = true;
  });
  while ((*pool)->waiters() == 0) std::this_thread::yield();  // it is blocked in Acquire
  EXPECT_FALSE(got.load());
  held = PoolBuffer();
  t.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ((*pool)->free_slots(), 1u);
}

}  // namespace
}  // namespace kvfs::device
