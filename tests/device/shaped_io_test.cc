#include "device/shaped_io.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/format.h"
#include "device/io_engine.h"
#include "temp_image.h"

namespace kvfs::device {
namespace {

using testing::Aligned;
using testing::AlignedBuf;
using testing::MakeImage;
using testing::TempDir;

constexpr uint64_t kMiB = 1 << 20;

TEST(ParseDeviceShapesTest, DefaultsRulesAndOverrides) {
  auto d = ParseDeviceShapes("", 2);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)[1].latency_ns, 80'000u);
  EXPECT_EQ((*d)[1].bytes_per_s, 2'000'000'000u);
  auto r = ParseDeviceShapes("800:200:2/100:1000", 3);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].latency_ns, 100'000u);
  EXPECT_EQ((*r)[0].bytes_per_s, 1'000'000'000u);
  EXPECT_EQ((*r)[2].latency_ns, 800'000u);
  EXPECT_EQ((*r)[2].bytes_per_s, 200'000'000u);
  for (const char* bad : {"80", "80:0", "x:100", "80:100:3", "80:100:1:2", "-1:100"}) {
    auto b = ParseDeviceShapes(bad, 3);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), EINVAL);
    EXPECT_NE(b.status().ToString().find("shape"), std::string::npos) << b.status().ToString();
  }
}

class ShapedIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      std::string p = dir_.Join("img" + std::to_string(i));
      MakeImage(p, 64 * kMiB);
      auto dev = BlockDevice::Open(p, false);
      ASSERT_TRUE(dev.ok()) << dev.status().ToString();
      devs_.push_back(std::move(dev).value());
    }
    IoEngineOptions opt;
    opt.staging_pool_bytes = 4 * kMiB;
    auto engine = IoEngine::Create({devs_[0].get(), devs_[1].get()}, opt);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }
  TempDir dir_;
  std::vector<std::unique_ptr<BlockDevice>> devs_;
  std::unique_ptr<IoEngine> engine_;
};

TEST_F(ShapedIoTest, BytesPassThroughUnchanged) {
  ShapedIo io(*engine_, {});
  AlignedBuf w = Aligned(kMiB), r = Aligned(kMiB);
  for (size_t i = 0; i < kMiB; ++i) w.get()[i] = static_cast<char>(i * 7 + 1);
  ASSERT_TRUE(io.WriteSync(1, 8 * kMiB, w.get(), kMiB).ok());
  ASSERT_TRUE(io.FlushSync(1).ok());
  ASSERT_TRUE(io.ReadSync(1, 8 * kMiB, r.get(), kMiB).ok());
  EXPECT_EQ(std::memcmp(w.get(), r.get(), kMiB), 0);
  // Errors pass through too (past the device's end).
  EXPECT_FALSE(io.ReadSync(1, 1ull << 40, r.get(), kBlockSize).ok());
}

// The model on a clock the test steps: commands complete exactly when the
// modelled drive would have finished them, whatever the machine's load.
// The real engine sits below a counter of its completions, so "not done
// yet" is checked once the engine has finished every read.
class ShapedClockTest : public ShapedIoTest {
 protected:
  class CountingIo : public BlockIo {
   public:
    explicit CountingIo(BlockIo& inner) : inner_(inner) {}
    void Submit(std::span<IoRequest> reqs) override {
      for (IoRequest& r : reqs) {
        r.done = [this, done = std::move(r.done)](Status st) mutable {
          done(std::move(st));  // ShapedIo completes it, or holds it till due
          completed.fetch_add(1);
        };
      }
      inner_.Submit(reqs);
    }
    uint32_t device_count() const override { return inner_.device_count(); }
    std::atomic<int> completed{0};

   private:
    BlockIo& inner_;
  };

  // Submits `count` x `len` byte reads of `device`; *done counts completions.
  void Submit(ShapedIo& io, uint32_t device, int count, size_t len) {
    std::vector<IoRequest> reqs;
    for (int i = 0; i < count; ++i) {
      bufs_.push_back(Aligned(len));
      IoRequest r;
      r.op = IoOp::kRead;
      r.device = device;
      r.byte_off = 4 * kMiB + i * len;
      r.buf = bufs_.back().get();
      r.len = len;
      r.done = [this, device](Status st) {
        EXPECT_TRUE(st.ok()) << st.ToString();
        std::lock_guard<std::mutex> l(mu_);
        ++done_[device];
        cv_.notify_all();
      };
      reqs.push_back(std::move(r));
    }
    io.Submit(reqs);
  }
  // Moves the clock to start + `us` once the engine finished every read;
  // returns how many reads of `device` are done then.
  int DoneAt(ShapedIo& io, uint64_t us, uint32_t device) {
    while (Io().completed.load() < static_cast<int>(bufs_.size())) {
      std::this_thread::yield();  // the engine's reads, not the model's
    }
    now_ns_ = kStart + us * 1000;
    io.ClockMoved();
    std::lock_guard<std::mutex> l(mu_);
    return done_[device];
  }
  // After the test: whatever is still held completes.
  void Drain(ShapedIo& io, int total) {
    now_ns_ = kStart + 3'600'000'000'000ull;
    io.ClockMoved();
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return done_[0] + done_[1] == total; });
  }

  static constexpr uint64_t kStart = 1'000'000'000;
  std::atomic<uint64_t> now_ns_{kStart};
  std::function<uint64_t()> clock_ = [this] { return now_ns_.load(); };
  // The engine under the counter (made once SetUp made the engine).
  CountingIo& Io() {
    if (!counting_) counting_ = std::make_unique<CountingIo>(*engine_);
    return *counting_;
  }
  std::unique_ptr<CountingIo> counting_;
  std::vector<AlignedBuf> bufs_;
  std::mutex mu_;
  std::condition_variable cv_;
  int done_[2] = {0, 0};
};

TEST_F(ShapedClockTest, BandwidthCeilingPerDevice) {
  // 100 MB/s, no latency: 1 MiB takes 10,485.76 us, so the 16th of 16
  // commands completes at 167,772 us and no earlier.
  ShapedIo io(Io(), {DeviceShape{0, 100'000'000}}, clock_);
  Submit(io, 0, 16, kMiB);
  EXPECT_EQ(DoneAt(io, 10'485, 0), 0);
  EXPECT_EQ(DoneAt(io, 10'486, 0), 1);
  EXPECT_EQ(DoneAt(io, 167'771, 0), 15);
  EXPECT_EQ(DoneAt(io, 167'773, 0), 16);
}

TEST_F(ShapedClockTest, LatencyOverlapsAcrossCommandsInFlight) {
  // 1000 us latency, 10 GB/s: 32 x 4 KiB take one latency (plus 13 us of
  // transfer), not 32.
  ShapedIo io(Io(), {DeviceShape{}, DeviceShape{1'000'000, 10'000'000'000}}, clock_);
  Submit(io, 1, 32, kBlockSize);
  EXPECT_EQ(DoneAt(io, 1'000, 1), 0);
  EXPECT_EQ(DoneAt(io, 1'014, 1), 32);
}

TEST_F(ShapedClockTest, ASlowDeviceDoesNotHoldUpAnother) {
  ShapedIo io(Io(), {DeviceShape{0, 100'000'000}, DeviceShape{1'000'000, 10'000'000'000}},
              clock_);
  Submit(io, 0, 32, kMiB);        // 335 ms of transfers queued on device 0
  Submit(io, 1, 8, 64 << 10);     // 1 ms and 52 us on device 1
  EXPECT_EQ(DoneAt(io, 1'053, 1), 8);
  EXPECT_EQ(DoneAt(io, 1'053, 0), 0);
  Drain(io, 40);
}

}  // namespace
}  // namespace kvfs::device
