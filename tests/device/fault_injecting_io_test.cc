#include "device/fault_injecting_io.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "common/format.h"
#include "device/io_engine.h"
#include "temp_image.h"

namespace kvfs::device {
namespace {

using testing::Aligned;
using testing::AlignedBuf;
using testing::FillPattern;
using testing::MakeImage;
using testing::TempDir;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t k64K = 64 << 10;

// Equality of byte strings that reports the first difference instead of
// printing kilobytes of binary.
::testing::AssertionResult Same(const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  size_t i = 0;
  while (got[i] == want[i]) ++i;
  bool zeros = got.find_first_not_of('\0') == std::string::npos;
  return ::testing::AssertionFailure() << "first difference at byte " << i
                                       << (zeros ? " (got all zeros)" : "");
}

class PowerCutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    image_ = dir_.Join("img");
    MakeImage(image_, 16 * kMiB);
    Start();
  }
  // "Power on": fresh device, engine and wrapper over the same image.
  void Start(IoEngineOptions opt = {}) {
    auto dev = BlockDevice::Open(image_, false);
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    dev_ = std::move(dev).value();
    opt.staging_pool_bytes = 4 * kMiB;
    auto engine = IoEngine::Create({dev_.get()}, opt);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
    io_ = std::make_unique<FaultInjectingIo>(*engine_);
  }
  void Stop() {
    io_.reset();
    engine_.reset();
    dev_.reset();
  }
  // What is on the device, read without the wrapper.
  std::string OnDevice(uint64_t off, uint64_t len) {
    auto b = Aligned(len);
    EXPECT_TRUE(engine_->ReadSync(0, off, b.get(), len).ok());
    return std::string(b.get(), len);
  }
  std::string ThroughWrapper(uint64_t off, uint64_t len) {
    auto b = Aligned(len);
    Status st = io_->ReadSync(0, off, b.get(), len);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return std::string(b.get(), len);
  }
  static std::string Pattern(uint64_t len, uint64_t seed) {
    std::string s(len, '\0');
    FillPattern(s.data(), len, seed);
    return s;
  }
  Status Write(uint64_t off, const std::string& data) {
    auto b = Aligned(data.size());
    std::memcpy(b.get(), data.data(), data.size());
    return io_->WriteSync(0, off, b.get(), data.size());
  }

  TempDir dir_;
  std::string image_;
  std::unique_ptr<BlockDevice> dev_;
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<FaultInjectingIo> io_;
};

TEST_F(PowerCutTest, WritesAfterLastFlushAreLostThoseBeforeSurvive) {
  const std::string zeros(k64K, '\0');
  const std::string a = Pattern(k64K, 1), b = Pattern(k64K, 2), c = Pattern(k64K, 3);
  const std::string a2 = Pattern(8192, 4);
  io_->EnablePowerCutMode();
  ASSERT_TRUE(Write(1 * kMiB, a).ok());
  ASSERT_TRUE(Write(2 * kMiB, b).ok());
  ASSERT_TRUE(io_->FlushSync(0).ok());
  ASSERT_TRUE(Write(3 * kMiB, c).ok());
  ASSERT_TRUE(Write(1 * kMiB + 8192, a2).ok());  // overwrites part of a
  EXPECT_EQ(io_->volatile_writes(), 2u);

  // Read-your-writes through the wrapper...
  std::string a_now = a;
  a_now.replace(8192, 8192, a2);
  EXPECT_TRUE(Same(ThroughWrapper(1 * kMiB, k64K), a_now));
  EXPECT_TRUE(Same(ThroughWrapper(3 * kMiB, k64K), c));
  // ...while the device only has what the flush wrote down.
  EXPECT_TRUE(Same(OnDevice(1 * kMiB, k64K), a));
  EXPECT_TRUE(Same(OnDevice(2 * kMiB, k64K), b));
  EXPECT_TRUE(Same(OnDevice(3 * kMiB, k64K), zeros));

  io_->PowerCut();
  auto buf = Aligned(k64K);
  EXPECT_EQ(io_->ReadSync(0, 0, buf.get(), k64K).code(), EIO);
  EXPECT_EQ(Write(4 * kMiB, a).code(), EIO);
  EXPECT_EQ(io_->FlushSync(0).code(), EIO);

  Stop();
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_TRUE(Same(OnDevice(1 * kMiB, k64K), a));
  EXPECT_TRUE(Same(OnDevice(2 * kMiB, k64K), b));
  EXPECT_TRUE(Same(OnDevice(3 * kMiB, k64K), zeros));
  EXPECT_TRUE(Same(OnDevice(4 * kMiB, k64K), zeros));
}

TEST_F(PowerCutTest, FlushWritesOverlappingWritesDownInOrder) {
  io_->EnablePowerCutMode();
  const std::string x = Pattern(k64K, 10), y = Pattern(k64K, 11), z = Pattern(16384, 12);
  ASSERT_TRUE(Write(0, x).ok());
  ASSERT_TRUE(Write(32768, y).ok());  // second half of x, and beyond
  ASSERT_TRUE(Write(28672, z).ok());  // straddles the x/y boundary
  std::string want = x + std::string(32768, '\0');
  want.replace(32768, k64K, y);
  want.replace(28672, 16384, z);
  EXPECT_TRUE(Same(ThroughWrapper(0, 2 * k64K).substr(0, want.size()), want));
  ASSERT_TRUE(io_->FlushSync(0).ok());
  EXPECT_EQ(io_->volatile_writes(), 0u);
  io_->PowerCut();
  Stop();
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_TRUE(Same(OnDevice(0, 2 * k64K).substr(0, want.size()), want));
}

TEST_F(PowerCutTest, FlushCoversOnlyWritesCompletedBeforeItWasSubmitted) {
  io_->EnablePowerCutMode();
  const std::string before = Pattern(k64K, 20), after = Pattern(k64K, 21);
  ASSERT_TRUE(Write(0, before).ok());
  // One batch: the flush, then a write submitted after it.
  auto wb = Aligned(k64K);
  std::memcpy(wb.get(), after.data(), k64K);
  std::mutex mu;
  std::condition_variable cv;
  int left = 2;
  Status flush_st, write_st;
  std::vector<IoRequest> batch(2);
  batch[0].op = IoOp::kFlush;
  batch[0].done = [&](Status st) {
    std::lock_guard<std::mutex> l(mu);
    flush_st = std::move(st);
    if (--left == 0) cv.notify_all();
  };
  batch[1] = {IoOp::kWrite, 0, kMiB, wb.get(), k64K, [&](Status st) {
                std::lock_guard<std::mutex> l(mu);
                write_st = std::move(st);
                if (--left == 0) cv.notify_all();
              }};
  io_->Submit(batch);
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return left == 0; });
  }
  ASSERT_TRUE(flush_st.ok()) << flush_st.ToString();
  ASSERT_TRUE(write_st.ok());
  EXPECT_TRUE(Same(ThroughWrapper(kMiB, k64K), after));
  io_->PowerCut();
  Stop();
  ASSERT_NO_FATAL_FAILURE(Start());
  EXPECT_TRUE(Same(OnDevice(0, k64K), before));
  EXPECT_TRUE(Same(OnDevice(kMiB, k64K), std::string(k64K, '\0')));
}

TEST_F(PowerCutTest, FlushDoesNotCoverAWriteWhoseDoneHasNotRun) {
  io_->EnablePowerCutMode();
  const std::string first = Pattern(k64K, 22), second = Pattern(k64K, 23);
  auto b1 = Aligned(k64K), b2 = Aligned(k64K);
  std::memcpy(b1.get(), first.data(), k64K);
  std::memcpy(b2.get(), second.data(), k64K);
  // Held writes complete in order on the wrapper's thread. The first
  // write's `done` blocks until the flush has finished, so the second
  // write, submitted just before the flush, cannot complete before it.
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::promise<void> first_running;
  std::promise<Status> second_done, flush_done;
  IoRequest w1{IoOp::kWrite, 0, kMiB, b1.get(), k64K, [&, opened](Status st) {
                 EXPECT_TRUE(st.ok());
                 first_running.set_value();
                 opened.wait();
               }};
  io_->Submit(std::span<IoRequest>(&w1, 1));
  first_running.get_future().wait();  // w1 completed: a flush covers it
  std::vector<IoRequest> batch(2);
  batch[0] = {IoOp::kWrite, 0, 2 * kMiB, b2.get(), k64K,
              [&](Status st) { second_done.set_value(std::move(st)); }};
  batch[1].op = IoOp::kFlush;
  batch[1].done = [&](Status st) { flush_done.set_value(std::move(st)); };
  io_->Submit(batch);
  Status fst = flush_done.get_future().get();
  gate.set_value();
  EXPECT_TRUE(fst.ok()) << fst.ToString();
  EXPECT_TRUE(second_done.get_future().get().ok());
  EXPECT_TRUE(Same(OnDevice(kMiB, k64K), first));
  EXPECT_TRUE(Same(OnDevice(2 * kMiB, k64K), std::string(k64K, '\0')));
  // A flush after the write completed does cover it.
  ASSERT_TRUE(io_->FlushSync(0).ok());
  EXPECT_TRUE(Same(OnDevice(2 * kMiB, k64K), second));
}

TEST_F(PowerCutTest, RequestsQueuedAtTheCutFailWithEIO) {
  Stop();
  IoEngineOptions opt;
  opt.rings = 1;
  opt.queue_depth = 1;  // one read in flight, the rest queued in the engine
  ASSERT_NO_FATAL_FAILURE(Start(opt));
  io_->EnablePowerCutMode();
  constexpr int kReads = 20;
  auto buf = Aligned(kReads * k64K);
  FaultInjectingIo* io = io_.get();  // io_ is null while reset() runs
  std::vector<int> codes(kReads, -1);
  std::atomic<int> calls{0};
  std::vector<IoRequest> batch;
  for (int i = 0; i < kReads; ++i) {
    batch.push_back({IoOp::kRead, 0, uint64_t(i) * k64K, buf.get() + i * k64K, k64K,
                     [&, i](Status st) {
                       codes[i] = st.code();
                       calls++;
                       // The first completion cuts the power: everything
                       // still in flight or queued behind it must fail.
                       if (i == 0) io->PowerCut();
                     }});
  }
  io_->Submit(batch);
  io_.reset();  // waits for every request
  EXPECT_EQ(calls.load(), kReads);
  EXPECT_EQ(codes[0], 0);
  for (int i = 1; i < kReads; ++i) EXPECT_EQ(codes[i], EIO) << i;
}

TEST_F(PowerCutTest, WithoutPowerCutModeWritesGoStraightDown) {
  const std::string d = Pattern(k64K, 30);
  ASSERT_TRUE(Write(5 * kMiB, d).ok());
  EXPECT_TRUE(Same(OnDevice(5 * kMiB, k64K), d));
  EXPECT_EQ(io_->volatile_writes(), 0u);
  EXPECT_EQ(io_->requests_seen(IoOp::kWrite), 1u);
}

TEST_F(PowerCutTest, FailedFlushIsReportedAndOtherDevicesUnaffected) {
  io_->FailRange(IoOp::kFlush, 0, 0, 0, EIO);
  EXPECT_EQ(io_->FlushSync(0).code(), EIO);
  EXPECT_EQ(io_->FlushSync(1).code(), EINVAL);  // no such device: the engine says so
  io_->ClearFaults();
  EXPECT_TRUE(io_->FlushSync(0).ok());
  EXPECT_EQ(io_->requests_seen(IoOp::kFlush), 3u);
  EXPECT_EQ(io_->requests_failed(), 1u);
}

TEST_F(PowerCutTest, MalformedWriteInPowerCutModeStillFailsWithEINVAL) {
  io_->EnablePowerCutMode();
  auto b = Aligned(8192);
  EXPECT_EQ(io_->WriteSync(0, 512, b.get(), 4096).code(), EINVAL);
  EXPECT_EQ(io_->WriteSync(0, 0, b.get(), 0).code(), EINVAL);
  EXPECT_EQ(io_->volatile_writes(), 0u);
}

}  // namespace
}  // namespace kvfs::device
