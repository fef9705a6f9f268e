#include "device/io_engine.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/format.h"
#include "device/fault_injecting_io.h"
#include "temp_image.h"

namespace kvfs::device {
namespace {

using testing::Aligned;
using testing::AlignedBuf;
using testing::FillPattern;
using testing::MakeImage;
using testing::TempDir;

constexpr uint64_t kMiB = 1 << 20;

// Set while this thread is inside Submit(): a `done` that sees it ran inline.
thread_local bool tls_in_submit = false;

void SubmitOne(BlockIo& io, IoRequest req) {
  tls_in_submit = true;
  io.Submit(std::span<IoRequest>(&req, 1));
  tls_in_submit = false;
}

// Counts down completions; Wait() returns when all arrived.
class Latch {
 public:
  explicit Latch(size_t n) : left_(n) {}
  void Arrive() {
    std::lock_guard<std::mutex> l(mu_);
    if (--left_ == 0) cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return left_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t left_;
};

// Runs requests 0..n-1 built by `make(i)` keeping `depth` of them in flight:
// each completion submits the next one from the engine thread. `check(i,
// st)` runs in the completion. Returns the statuses in index order.
std::vector<Status> RunAtDepth(BlockIo& io, size_t n, size_t depth,
                               const std::function<IoRequest(size_t)>& make,
                               const std::function<void(size_t, const Status&)>& check) {
  std::vector<Status> statuses(n);
  std::vector<std::atomic<int>> calls(n);
  std::atomic<size_t> next{0};
  std::atomic<int> inline_done{0};
  Latch latch(n);
  std::function<IoRequest(size_t)> build = [&](size_t i) {
    IoRequest req = make(i);
    req.done = [&, i](Status st) {
      if (tls_in_submit) inline_done++;
      calls[i]++;
      check(i, st);
      statuses[i] = std::move(st);
      size_t j = next.fetch_add(1);
      if (j < n) SubmitOne(io, build(j));
      latch.Arrive();
    };
    return req;
  };
  const size_t initial = std::min(n, depth);
  next.store(initial);
  std::vector<IoRequest> first;
  for (size_t i = 0; i < initial; ++i) first.push_back(build(i));
  // The initial window goes in as one batch.
  tls_in_submit = true;
  io.Submit(first);
  tls_in_submit = false;
  latch.Wait();
  EXPECT_EQ(inline_done.load(), 0) << "done ran inside Submit()";
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(calls[i].load(), 1) << "request " << i;
  return statuses;
}

class IoEngineTest : public ::testing::Test {
 protected:
  void Open(uint64_t bytes, IoEngineOptions options = {}) {
    image_ = dir_.Join("img");
    MakeImage(image_, bytes);
    auto dev = BlockDevice::Open(image_, false);
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    dev_ = std::move(dev).value();
    if (options.staging_pool_bytes == IoEngineOptions{}.staging_pool_bytes) {
      options.staging_pool_bytes = 32 * kMiB;  // keep the tests light
    }
    auto engine = IoEngine::Create({dev_.get()}, options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }

  TempDir dir_;
  std::string image_;
  std::unique_ptr<BlockDevice> dev_;
  std::unique_ptr<IoEngine> engine_;
};

// A buffer that is either a pool slot (fixed path) or plain heap memory.
struct TestBuf {
  PoolBuffer pooled;
  AlignedBuf heap;
  char* data = nullptr;
};

TestBuf MakeBuf(IoEngine& engine, size_t len, bool prefer_pool) {
  TestBuf b;
  if (prefer_pool && len <= engine.buffers().slot_bytes()) b.pooled = engine.buffers().TryAcquire();
  if (b.pooled) {
    b.data = b.pooled.data();
  } else {
    b.heap = Aligned(len);
    b.data = b.heap.get();
  }
  return b;
}

TEST_F(IoEngineTest, RandomWritesReadBackAtQueueDepths1To64) {
  constexpr uint64_t kSlot = 4 * kMiB;
  constexpr size_t kSlots = 64;
  IoEngineOptions opt;
  opt.staging_slot_bytes = kSlot;
  opt.staging_pool_bytes = 16 * kSlot;
  ASSERT_NO_FATAL_FAILURE(Open(kSlots * kSlot, opt));
  std::vector<char> model(kSlots * kSlot, 0);  // fallocated space reads as zeros
  std::mt19937_64 rng(42);
  auto random_len = [&] { return (1 + rng() % (kSlot / kBlockSize)) * kBlockSize; };

  for (size_t depth : {1, 2, 3, 4, 8, 16, 32, 64}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    const size_t n = depth + 16;
    // Writes in flight together must not overlap: each holds a free slot.
    std::mutex mu;
    std::set<size_t> free_slots;
    for (size_t s = 0; s < kSlots; ++s) free_slots.insert(s);
    std::vector<size_t> slot_of(n);
    std::vector<TestBuf> bufs(n);
    auto make_write = [&](size_t i) {
      std::lock_guard<std::mutex> l(mu);
      auto it = free_slots.begin();
      std::advance(it, rng() % free_slots.size());
      slot_of[i] = *it;
      free_slots.erase(it);
      uint64_t len = random_len();
      uint64_t off = slot_of[i] * kSlot + (rng() % ((kSlot - len) / kBlockSize + 1)) * kBlockSize;
      bufs[i] = MakeBuf(*engine_, len, i % 2 == 0);
      FillPattern(bufs[i].data, len, depth * 1000 + i);
      std::memcpy(model.data() + off, bufs[i].data, len);
      return IoRequest{IoOp::kWrite, 0, off, bufs[i].data, len, nullptr};
    };
    auto release_write = [&](size_t i, const Status&) {
      std::lock_guard<std::mutex> l(mu);
      bufs[i] = TestBuf();
      free_slots.insert(slot_of[i]);
    };
    for (const Status& st : RunAtDepth(*engine_, n, depth, make_write, release_write)) {
      ASSERT_TRUE(st.ok()) << st.ToString();
    }

    // Reads anywhere (overlap is fine), compared with the model on arrival.
    std::vector<IoRequest> reads(n);
    std::atomic<int> mismatches{0};
    auto make_read = [&](size_t i) {
      std::lock_guard<std::mutex> l(mu);
      uint64_t len = random_len();
      uint64_t off = (rng() % ((model.size() - len) / kBlockSize + 1)) * kBlockSize;
      bufs[i] = MakeBuf(*engine_, len, i % 2 == 1);
      std::memset(bufs[i].data, 0xEE, len);
      reads[i] = IoRequest{IoOp::kRead, 0, off, bufs[i].data, len, nullptr};
      return reads[i];
    };
    auto verify_read = [&](size_t i, const Status& st) {
      std::lock_guard<std::mutex> l(mu);
      if (st.ok() && std::memcmp(bufs[i].data, model.data() + reads[i].byte_off, reads[i].len))
        mismatches++;
      bufs[i] = TestBuf();
    };
    for (const Status& st : RunAtDepth(*engine_, n, depth, make_read, verify_read)) {
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    EXPECT_EQ(mismatches.load(), 0);
  }
  IoEngineStats s = engine_->stats();
  EXPECT_GT(s.fixed_commands, 0u);                 // pool buffers went READ/WRITE_FIXED
  EXPECT_LT(s.fixed_commands, s.commands);         // heap buffers did not
  EXPECT_EQ(engine_->buffers().free_slots(), 16u);  // every slot came back
}

TEST_F(IoEngineTest, LargeRequestsAreSplitAcrossRingsAndReassembled) {
  IoEngineOptions opt;
  opt.rings = 3;
  opt.max_command_bytes = 64 << 10;
  ASSERT_NO_FATAL_FAILURE(Open(64 * kMiB, opt));
  const uint64_t len = 4 * kMiB + 12 * 1024;  // 65 full commands + a 12 KiB tail
  auto w = Aligned(len), r = Aligned(len);
  FillPattern(w.get(), len, 5);
  uint64_t before = engine_->stats().commands;
  ASSERT_TRUE(engine_->WriteSync(0, 8 * kMiB, w.get(), len).ok());
  EXPECT_EQ(engine_->stats().commands - before, 65u);
  std::memset(r.get(), 0, len);
  ASSERT_TRUE(engine_->ReadSync(0, 8 * kMiB, r.get(), len).ok());
  EXPECT_EQ(engine_->stats().commands - before, 130u);
  EXPECT_EQ(std::memcmp(w.get(), r.get(), len), 0);
  // With 3 rings and 65 commands, each ring got some: the in-flight high
  // water mark is at least the per-ring share.
  EXPECT_GE(engine_->stats().max_ring_inflight, 2u);
}

TEST_F(IoEngineTest, SplitRequestFailsIfAnyCommandFailsAndOthersStillRun) {
  IoEngineOptions opt;
  opt.max_command_bytes = 64 << 10;
  ASSERT_NO_FATAL_FAILURE(Open(16 * kMiB, opt));
  FaultInjectingIo faulty(*engine_);
  // A fault on one 4 KiB block in the middle of a 1 MiB request.
  faulty.FailRange(IoOp::kRead, 0, 2 * kMiB + 300 * 1024, 4096, ENODATA);
  auto b = Aligned(kMiB);
  EXPECT_EQ(faulty.ReadSync(0, 2 * kMiB, b.get(), kMiB).code(), ENODATA);
  EXPECT_TRUE(faulty.ReadSync(0, 3 * kMiB, b.get(), kMiB).ok());
}

TEST_F(IoEngineTest, FixedBufferPathIsUsedOnlyForPoolBuffers) {
  ASSERT_NO_FATAL_FAILURE(Open(16 * kMiB));
  PoolBuffer pooled = engine_->buffers().Acquire();
  auto heap = Aligned(pooled.size());
  FillPattern(pooled.data(), pooled.size(), 9);

  IoEngineStats s0 = engine_->stats();
  ASSERT_TRUE(engine_->WriteSync(0, 0, pooled.data(), pooled.size()).ok());
  IoEngineStats s1 = engine_->stats();
  EXPECT_EQ(s1.fixed_commands - s0.fixed_commands, s1.commands - s0.commands);

  ASSERT_TRUE(engine_->ReadSync(0, 0, heap.get(), pooled.size()).ok());
  IoEngineStats s2 = engine_->stats();
  EXPECT_EQ(s2.fixed_commands, s1.fixed_commands);
  EXPECT_EQ(std::memcmp(heap.get(), pooled.data(), pooled.size()), 0);

  // And back: heap -> device -> pool.
  FillPattern(heap.get(), pooled.size(), 10);
  ASSERT_TRUE(engine_->WriteSync(0, 4 * kMiB, heap.get(), pooled.size()).ok());
  std::memset(pooled.data(), 0, pooled.size());
  ASSERT_TRUE(engine_->ReadSync(0, 4 * kMiB, pooled.data(), pooled.size()).ok());
  EXPECT_EQ(std::memcmp(heap.get(), pooled.data(), pooled.size()), 0);
  EXPECT_GT(engine_->stats().fixed_commands, s2.fixed_commands);
}

TEST_F(IoEngineTest, RegisteredRegionsGoFixedUntilUnregistered) {
  ASSERT_NO_FATAL_FAILURE(Open(16 * kMiB));
  auto region = Aligned(4 * kMiB);
  auto check = Aligned(kMiB);
  FillPattern(check.get(), kMiB, 11);
  ASSERT_TRUE(engine_->WriteSync(0, 0, check.get(), kMiB).ok());

  // Not registered: an ordinary read.
  IoEngineStats s0 = engine_->stats();
  ASSERT_TRUE(engine_->ReadSync(0, 0, region.get() + kMiB, kMiB).ok());
  EXPECT_EQ(engine_->stats().fixed_commands, s0.fixed_commands);

  ASSERT_TRUE(engine_->RegisterRegion(region.get(), 4 * kMiB).ok());
  std::memset(region.get(), 0, 4 * kMiB);
  IoEngineStats s1 = engine_->stats();
  ASSERT_TRUE(engine_->ReadSync(0, 0, region.get() + 2 * kMiB, kMiB).ok());
  IoEngineStats s2 = engine_->stats();
  EXPECT_EQ(s2.fixed_commands - s1.fixed_commands, s2.commands - s1.commands);
  EXPECT_EQ(std::memcmp(region.get() + 2 * kMiB, check.get(), kMiB), 0);
  // A write from it, read back elsewhere: the bytes are the region's.
  ASSERT_TRUE(engine_->WriteSync(0, 4 * kMiB, region.get() + 2 * kMiB, kMiB).ok());
  auto back = Aligned(kMiB);
  ASSERT_TRUE(engine_->ReadSync(0, 4 * kMiB, back.get(), kMiB).ok());
  EXPECT_EQ(std::memcmp(back.get(), check.get(), kMiB), 0);

  // A buffer that straddles a region's end: not fixed (the kernel would
  // refuse it), still right.
  auto wide = Aligned(4 * kMiB);
  ASSERT_TRUE(engine_->RegisterRegion(wide.get(), 2 * kMiB).ok());
  IoEngineStats s3 = engine_->stats();
  ASSERT_TRUE(engine_->ReadSync(0, 0, wide.get() + kMiB + kMiB / 2, kMiB).ok());
  EXPECT_EQ(engine_->stats().fixed_commands, s3.fixed_commands);
  EXPECT_EQ(std::memcmp(wide.get() + kMiB + kMiB / 2, check.get(), kMiB), 0);
  engine_->UnregisterRegions(wide.get(), 4 * kMiB);

  engine_->UnregisterRegions(region.get(), 4 * kMiB);
  IoEngineStats s4 = engine_->stats();
  ASSERT_TRUE(engine_->ReadSync(0, 0, region.get(), kMiB).ok());
  EXPECT_EQ(engine_->stats().fixed_commands, s4.fixed_commands);
  EXPECT_EQ(std::memcmp(region.get(), check.get(), kMiB), 0);
  // Its slots are free again: registering it anew works.
  EXPECT_TRUE(engine_->RegisterRegion(region.get(), 4 * kMiB).ok());
  engine_->UnregisterRegions(region.get(), 4 * kMiB);
}

TEST_F(IoEngineTest, WorksWithTheStagingPoolDisabled) {
  IoEngineOptions opt;
  opt.staging_pool_bytes = 0;
  image_ = dir_.Join("img");
  MakeImage(image_, 4 * kMiB);
  auto dev = BlockDevice::Open(image_, false);
  ASSERT_TRUE(dev.ok());
  auto engine = IoEngine::Create({dev->get()}, opt);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto w = Aligned(kMiB), r = Aligned(kMiB);
  FillPattern(w.get(), kMiB, 3);
  ASSERT_TRUE((*engine)->WriteSync(0, kMiB, w.get(), kMiB).ok());
  ASSERT_TRUE((*engine)->ReadSync(0, kMiB, r.get(), kMiB).ok());
  EXPECT_EQ(std::memcmp(w.get(), r.get(), kMiB), 0);
  EXPECT_EQ((*engine)->stats().fixed_commands, 0u);
}

TEST_F(IoEngineTest, ReadStraddlingEndOfFileGetsValidBytesThenEIO) {
  ASSERT_NO_FATAL_FAILURE(Open(8 * kMiB));
  auto w = Aligned(8192), r = Aligned(8192);
  FillPattern(w.get(), 8192, 77);
  ASSERT_TRUE(engine_->WriteSync(0, 8 * kMiB - 8192, w.get(), 8192).ok());
  // Shrink the image behind the engine's back: the last 8 KiB now straddle
  // EOF, so the kernel returns 4 KiB, and the remainder returns 0 bytes.
  ASSERT_EQ(::truncate(image_.c_str(), 8 * kMiB - 4096), 0);
  std::memset(r.get(), 0, 8192);
  uint64_t short_before = engine_->stats().short_transfers;
  Status st = engine_->ReadSync(0, 8 * kMiB - 8192, r.get(), 8192);
  EXPECT_EQ(st.code(), EIO);
  EXPECT_NE(st.context().find(image_), std::string::npos) << st.ToString();
  EXPECT_NE(st.context().find("no progress"), std::string::npos) << st.ToString();
  EXPECT_EQ(engine_->stats().short_transfers - short_before, 1u);
  EXPECT_EQ(std::memcmp(r.get(), w.get(), 4096), 0);  // the part before EOF arrived
  // A read wholly before the new EOF is unaffected.
  EXPECT_TRUE(engine_->ReadSync(0, 8 * kMiB - 16384, r.get(), 8192).ok());
}

TEST_F(IoEngineTest, InvalidRequestsFailWithEINVALAndOnlyThemselves) {
  ASSERT_NO_FATAL_FAILURE(Open(4 * kMiB));
  auto b = Aligned(16 * 4096);
  auto good = Aligned(64 << 10);
  FillPattern(good.get(), 64 << 10, 1);
  ASSERT_TRUE(engine_->WriteSync(0, kMiB, good.get(), 64 << 10).ok());
  std::vector<AlignedBuf> goods;

  struct Case {
    IoRequest req;
    int want;
  };
  std::vector<Case> cases = {
      {{IoOp::kRead, 0, 4 * kMiB, b.get(), 4096, nullptr}, EINVAL},          // at end
      {{IoOp::kRead, 0, 4 * kMiB - 4096, b.get(), 8192, nullptr}, EINVAL},   // straddles end
      {{IoOp::kRead, 0, 1u << 31, b.get(), 4096, nullptr}, EINVAL},          // far beyond
      {{IoOp::kRead, 0, 512, b.get(), 4096, nullptr}, EINVAL},               // offset
      {{IoOp::kRead, 0, 0, b.get() + 512, 4096, nullptr}, EINVAL},           // buffer
      {{IoOp::kWrite, 0, 0, b.get(), 1000, nullptr}, EINVAL},                // length
      {{IoOp::kRead, 0, 0, b.get(), 0, nullptr}, EINVAL},                    // empty
      {{IoOp::kRead, 7, 0, b.get(), 4096, nullptr}, EINVAL},                 // device
      {{IoOp::kFlush, 3, 0, nullptr, 0, nullptr}, EINVAL},                   // flush device
      {{IoOp::kRead, 0, 0, nullptr, 4096, nullptr}, EINVAL},                 // null buffer
  };
  // Interleave valid reads of the written range between the bad ones.
  std::vector<IoRequest> batch;
  std::vector<int> want;
  for (auto& c : cases) {
    goods.push_back(Aligned(64 << 10));
    batch.push_back({IoOp::kRead, 0, kMiB, goods.back().get(), 64 << 10, nullptr});
    want.push_back(0);
    batch.push_back(c.req);
    want.push_back(c.want);
  }
  std::vector<int> got(batch.size(), -1);
  std::vector<std::thread::id> threads(batch.size());
  std::atomic<int> calls{0};
  Latch latch(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].done = [&, i](Status st) {
      got[i] = st.code();
      threads[i] = std::this_thread::get_id();
      calls++;
      latch.Arrive();
    };
  }
  engine_->Submit(batch);
  latch.Wait();
  EXPECT_EQ(calls.load(), static_cast<int>(batch.size()));
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << "request " << i;
    EXPECT_NE(threads[i], std::this_thread::get_id()) << "done ran on the submitting thread";
  }
  for (auto& g : goods) EXPECT_EQ(std::memcmp(g.get(), good.get(), 64 << 10), 0);
}

TEST_F(IoEngineTest, WriteToReadOnlyDeviceIsEROFS) {
  image_ = dir_.Join("img");
  MakeImage(image_, 4 * kMiB);
  auto dev = BlockDevice::Open(image_, true);
  ASSERT_TRUE(dev.ok());
  IoEngineOptions opt;
  opt.staging_pool_bytes = 4 * kMiB;
  auto engine = IoEngine::Create({dev->get()}, opt);
  ASSERT_TRUE(engine.ok());
  auto b = Aligned(4096);
  EXPECT_EQ((*engine)->WriteSync(0, 0, b.get(), 4096).code(), EROFS);
  EXPECT_TRUE((*engine)->ReadSync(0, 0, b.get(), 4096).ok());
}

TEST_F(IoEngineTest, KernelErrorReachesExactlyItsRequest) {
  ASSERT_NO_FATAL_FAILURE(Open(4 * kMiB));
  // A page the kernel cannot write into: O_DIRECT pinning fails, so the
  // CQE carries -EFAULT for that request alone.
  void* bad = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(bad, MAP_FAILED);
  std::vector<AlignedBuf> bufs;
  std::vector<IoRequest> batch;
  for (int i = 0; i < 9; ++i) {
    bufs.push_back(Aligned(4096));
    batch.push_back({IoOp::kRead, 0, uint64_t(i) * 4096, i == 4 ? bad : bufs.back().get(), 4096,
                     nullptr});
  }
  std::vector<Status> got(batch.size());
  Latch latch(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].done = [&, i](Status st) {
      got[i] = std::move(st);
      latch.Arrive();
    };
  }
  engine_->Submit(batch);
  latch.Wait();
  for (size_t i = 0; i < got.size(); ++i) {
    if (i == 4) {
      EXPECT_EQ(got[i].code(), EFAULT) << got[i].ToString();
      EXPECT_NE(got[i].context().find(image_ + ": read of 4096 bytes at byte_off 16384"),
                std::string::npos)
          << got[i].ToString();
    } else {
      EXPECT_TRUE(got[i].ok()) << i << ": " << got[i].ToString();
    }
  }
  ::munmap(bad, 4096);
}

TEST_F(IoEngineTest, InjectedErrorReachesExactlyItsRequest) {
  ASSERT_NO_FATAL_FAILURE(Open(8 * kMiB));
  FaultInjectingIo faulty(*engine_);
  auto pattern = Aligned(16 * 65536);
  FillPattern(pattern.get(), 16 * 65536, 4);
  faulty.FailRange(IoOp::kWrite, 0, 5 * 65536 + 8192, 4096, ENOSPC);
  faulty.FailRange(IoOp::kRead, 0, 9 * 65536, 4096, EIO);

  std::vector<IoRequest> writes;
  std::vector<Status> wst(16);
  Latch wl(16);
  for (int i = 0; i < 16; ++i) {
    writes.push_back({IoOp::kWrite, 0, uint64_t(i) * 65536, pattern.get() + i * 65536, 65536,
                      [&, i](Status st) {
                        wst[i] = std::move(st);
                        wl.Arrive();
                      }});
  }
  faulty.Submit(writes);
  wl.Wait();
  for (int i = 0; i < 16; ++i) EXPECT_EQ(wst[i].code(), i == 5 ? ENOSPC : 0) << i;

  auto back = Aligned(16 * 65536);
  std::memset(back.get(), 0x55, 16 * 65536);
  std::vector<IoRequest> reads;
  std::vector<Status> rst(16);
  Latch rl(16);
  for (int i = 0; i < 16; ++i) {
    reads.push_back({IoOp::kRead, 0, uint64_t(i) * 65536, back.get() + i * 65536, 65536,
                     [&, i](Status st) {
                       rst[i] = std::move(st);
                       rl.Arrive();
                     }});
  }
  faulty.Submit(reads);
  rl.Wait();
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(rst[i].code(), i == 9 ? EIO : 0) << i;
    if (i == 5) {
      // The failed write never reached the device: still zeros.
      EXPECT_EQ(std::memcmp(back.get() + i * 65536, std::string(65536, '\0').data(), 65536), 0);
    } else if (i != 9) {
      EXPECT_EQ(std::memcmp(back.get() + i * 65536, pattern.get() + i * 65536, 65536), 0) << i;
    }
  }
  EXPECT_EQ(faulty.requests_failed(), 2u);
  EXPECT_EQ(faulty.requests_seen(IoOp::kRead), 16u);
  faulty.ClearFaults();
  EXPECT_TRUE(faulty.ReadSync(0, 9 * 65536, back.get(), 65536).ok());
}

TEST_F(IoEngineTest, ManyThreadsSubmitConcurrently) {
  ASSERT_NO_FATAL_FAILURE(Open(64 * kMiB));
  constexpr int kThreads = 8;
  constexpr int kPerThread = 48;
  constexpr uint64_t kRegion = 8 * kMiB;
  std::atomic<int> callbacks{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      // Batches of 8 non-overlapping writes (one 1 MiB lane each), then the
      // same ranges read back and compared.
      for (int round = 0; round < kPerThread / 8; ++round) {
        std::vector<AlignedBuf> wbufs, rbufs;
        std::vector<IoRequest> ws, rs;
        Latch wl(8), rl(8);
        for (int k = 0; k < 8; ++k) {
          uint64_t len = (1 + rng() % 64) * 4096;
          uint64_t off = t * kRegion + k * kMiB + (rng() % ((kMiB - len) / 4096 + 1)) * 4096;
          wbufs.push_back(Aligned(len));
          rbufs.push_back(Aligned(len));
          FillPattern(wbufs.back().get(), len, t * 1000 + round * 10 + k);
          ws.push_back({IoOp::kWrite, 0, off, wbufs.back().get(), len, [&](Status st) {
                          if (!st.ok()) failures++;
                          callbacks++;
                          wl.Arrive();
                        }});
          rs.push_back({IoOp::kRead, 0, off, rbufs.back().get(), len, [&](Status st) {
                          if (!st.ok()) failures++;
                          callbacks++;
                          rl.Arrive();
                        }});
        }
        engine_->Submit(ws);
        wl.Wait();
        engine_->Submit(rs);
        rl.Wait();
        for (int k = 0; k < 8; ++k) {
          if (std::memcmp(wbufs[k].get(), rbufs[k].get(), ws[k].len) != 0) failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(callbacks.load(), kThreads * kPerThread * 2);
}

TEST_F(IoEngineTest, PerRingInFlightNeverExceedsQueueDepth) {
  IoEngineOptions opt;
  opt.rings = 2;
  opt.queue_depth = 3;
  ASSERT_NO_FATAL_FAILURE(Open(16 * kMiB, opt));
  auto b = Aligned(64 * 65536);
  std::vector<IoRequest> batch;
  Latch latch(64);
  std::atomic<int> ok{0};
  for (int i = 0; i < 64; ++i) {
    batch.push_back({IoOp::kRead, 0, uint64_t(i) * 65536, b.get() + i * 65536, 65536,
                     [&](Status st) {
                       if (st.ok()) ok++;
                       latch.Arrive();
                     }});
  }
  engine_->Submit(batch);
  latch.Wait();
  EXPECT_EQ(ok.load(), 64);
  EXPECT_EQ(engine_->stats().max_ring_inflight, 3u);
}

TEST_F(IoEngineTest, DestructorDrainsQueuedInFlightAndFollowUpWork) {
  IoEngineOptions opt;
  opt.rings = 2;
  opt.queue_depth = 2;  // most of the batch waits in the engine's queues
  ASSERT_NO_FATAL_FAILURE(Open(32 * kMiB, opt));
  constexpr int kBatch = 200;
  constexpr int kChain = 50;
  auto b = Aligned(kBatch * 65536);
  std::atomic<int> done{0}, ok{0}, chained{0};
  std::vector<IoRequest> batch;
  for (int i = 0; i < kBatch; ++i) {
    batch.push_back({IoOp::kRead, 0, uint64_t(i) * 65536, b.get() + i * 65536, 65536,
                     [&](Status st) {
                       if (st.ok()) ok++;
                       done++;
                     }});
  }
  // A chain in which each callback submits the next request, as an upper
  // layer does when one I/O's completion triggers the next.
  auto cb = Aligned(4096);
  IoEngine* engine = engine_.get();  // engine_ is null while reset() runs
  std::function<void(Status)> step = [&](Status st) {
    if (st.ok()) ok++;
    done++;
    if (++chained < kChain) {
      SubmitOne(*engine, {IoOp::kRead, 0, 0, cb.get(), 4096, step});
    }
  };
  SubmitOne(*engine_, {IoOp::kRead, 0, 0, cb.get(), 4096, step});
  engine_->Submit(batch);
  engine_.reset();  // must wait for all of it
  EXPECT_EQ(done.load(), kBatch + kChain);
  EXPECT_EQ(ok.load(), kBatch + kChain);
}

TEST_F(IoEngineTest, FlushSubmittedFromWriteCompletionSucceeds) {
  ASSERT_NO_FATAL_FAILURE(Open(8 * kMiB));
  auto w = Aligned(kMiB);
  FillPattern(w.get(), kMiB, 8);
  std::promise<Status> flushed;
  IoRequest write{IoOp::kWrite, 0, 2 * kMiB, w.get(), kMiB, [&](Status st) {
                    EXPECT_TRUE(st.ok()) << st.ToString();
                    SubmitOne(*engine_, {IoOp::kFlush, 0, 0, nullptr, 0, [&](Status fst) {
                                           flushed.set_value(std::move(fst));
                                         }});
                  }};
  SubmitOne(*engine_, std::move(write));
  Status st = flushed.get_future().get();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(engine_->FlushSync(0).ok());
  EXPECT_EQ(engine_->FlushSync(1).code(), EINVAL);
  // The data is on the device as seen through an independent descriptor.
  dev_.reset();
  engine_.reset();
  auto again = BlockDevice::Open(image_, true);
  ASSERT_TRUE(again.ok());
  auto r = Aligned(kMiB);
  ASSERT_TRUE((*again)->ReadAt(2 * kMiB, r.get(), kMiB).ok());
  EXPECT_EQ(std::memcmp(r.get(), w.get(), kMiB), 0);
}

TEST_F(IoEngineTest, TwoDevicesAreAddressedByIndex) {
  ASSERT_NO_FATAL_FAILURE(Open(4 * kMiB));
  std::string second = dir_.Join("img2");
  MakeImage(second, 8 * kMiB);
  auto dev2 = BlockDevice::Open(second, false);
  ASSERT_TRUE(dev2.ok());
  IoEngineOptions opt;
  opt.staging_pool_bytes = 4 * kMiB;
  auto engine = IoEngine::Create({dev_.get(), dev2->get()}, opt);
  ASSERT_TRUE(engine.ok());
  EXPECT_EQ((*engine)->device_count(), 2u);
  auto a = Aligned(65536), b = Aligned(65536), r = Aligned(65536);
  FillPattern(a.get(), 65536, 1);
  FillPattern(b.get(), 65536, 2);
  ASSERT_TRUE((*engine)->WriteSync(0, 0, a.get(), 65536).ok());
  ASSERT_TRUE((*engine)->WriteSync(1, 0, b.get(), 65536).ok());
  ASSERT_TRUE((*engine)->ReadSync(0, 0, r.get(), 65536).ok());
  EXPECT_EQ(std::memcmp(r.get(), a.get(), 65536), 0);
  ASSERT_TRUE((*engine)->ReadSync(1, 0, r.get(), 65536).ok());
  EXPECT_EQ(std::memcmp(r.get(), b.get(), 65536), 0);
  // Device 1 is larger: an offset valid only there.
  EXPECT_TRUE((*engine)->ReadSync(1, 6 * kMiB, r.get(), 65536).ok());
  EXPECT_EQ((*engine)->ReadSync(0, 6 * kMiB, r.get(), 65536).code(), EINVAL);
  EXPECT_TRUE((*engine)->FlushSync(1).ok());
}

// The engine's completion threads (named kvfs-io-N): their ids.
std::vector<std::string> CompletionThreads() {
  std::vector<std::string> tids;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name.rfind("kvfs-io-", 0) == 0) tids.push_back(e.path().filename().string());
  }
  return tids;
}

std::string ReadProc(const std::string& tid, const char* file) {
  std::ifstream in("/proc/self/task/" + tid + "/" + file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Whether thread `tid` is asleep in io_uring_enter: /proc's syscall file
// names the call a blocked thread is in ("running" for one that is not).
bool AsleepInEnter(const std::string& tid) {
  return ReadProc(tid, "syscall").rfind(std::to_string(SYS_io_uring_enter) + " ", 0) == 0;
}

std::string VoluntarySwitches(const std::string& tid) {
  const std::string status = ReadProc(tid, "status");
  const size_t at = status.find("voluntary_ctxt_switches");
  return at == std::string::npos ? "" : status.substr(at, status.find('\n', at) - at);
}

// An idle completion thread blocks in io_uring_enter until a CQE arrives:
// one that polled would burn a core. Gated on the thread's state, not on
// the CPU a time window shows: each thread is found asleep in the call
// (waiting for it, boundedly), then stays there without waking across
// many looks.
TEST_F(IoEngineTest, CompletionThreadsSleepWhenIdle) {
  ASSERT_NO_FATAL_FAILURE(Open(4 * kMiB));
  auto b = Aligned(4096);
  ASSERT_TRUE(engine_->ReadSync(0, 0, b.get(), 4096).ok());
  const std::vector<std::string> tids = CompletionThreads();
  ASSERT_FALSE(tids.empty());
  for (const std::string& tid : tids) {
    for (int i = 0; i < 10000 && !AsleepInEnter(tid); i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(AsleepInEnter(tid)) << "kvfs-io thread " << tid << ": " << ReadProc(tid, "syscall");
    const std::string switches = VoluntarySwitches(tid);
    for (int i = 0; i < 50; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ASSERT_TRUE(AsleepInEnter(tid)) << tid;
    }
    EXPECT_EQ(VoluntarySwitches(tid), switches) << "kvfs-io thread " << tid << " woke while idle";
  }
}

TEST(IoEngineCreate, RejectsBadOptions) {
  TempDir dir;
  MakeImage(dir.Join("img"), kMiB);
  auto dev = BlockDevice::Open(dir.Join("img"), false);
  ASSERT_TRUE(dev.ok());
  IoEngineOptions opt;
  opt.staging_pool_bytes = kMiB;
  IoEngineOptions bad = opt;
  bad.queue_depth = 0;
  EXPECT_EQ(IoEngine::Create({dev->get()}, bad).status().code(), EINVAL);
  bad = opt;
  bad.max_command_bytes = 1000;
  EXPECT_EQ(IoEngine::Create({dev->get()}, bad).status().code(), EINVAL);
  bad = opt;
  bad.staging_slot_bytes = 100;
  EXPECT_EQ(IoEngine::Create({dev->get()}, bad).status().code(), EINVAL);
  EXPECT_EQ(IoEngine::Create({}, opt).status().code(), EINVAL);
  auto good = IoEngine::Create({dev->get()}, opt);
  ASSERT_TRUE(good.ok());
  unsigned want = std::min(std::max(std::thread::hardware_concurrency(), 2u), 8u);
  EXPECT_EQ((*good)->options().rings, want);
}

}  // namespace
}  // namespace kvfs::device
