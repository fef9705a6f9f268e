#include "device/shaped_io.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <future>
#include <string>
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

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

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
  // Reads `count` x `len` bytes from `device` at once; seconds until all done.
  double ReadBurst(BlockIo& io, uint32_t device, int count, size_t len) {
    std::vector<AlignedBuf> bufs;
    std::vector<IoRequest> reqs;
    std::vector<std::promise<Status>> done(count);
    for (int i = 0; i < count; ++i) {
      bufs.push_back(Aligned(len));
      IoRequest r;
      r.op = IoOp::kRead;
      r.device = device;
      r.byte_off = 4 * kMiB + i * len;
      r.buf = bufs.back().get();
      r.len = len;
      r.done = [&done, i](Status st) { done[i].set_value(st); };
      reqs.push_back(std::move(r));
    }
    auto t0 = std::chrono::steady_clock::now();
    io.Submit(reqs);
    for (auto& p : done) EXPECT_TRUE(p.get_future().get().ok());
    return Seconds(t0);
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

TEST_F(ShapedIoTest, BandwidthCeilingAndLatencyPerDevice) {
  // Device 0: 100 MB/s, so 16 MiB take >= 0.168 s; device 1: 1000 us latency.
  ShapedIo io(*engine_, {DeviceShape{0, 100'000'000}, DeviceShape{1'000'000, 10'000'000'000}});
  double slow = ReadBurst(io, 0, 16, kMiB);
  EXPECT_GE(slow, 0.165);
  EXPECT_LT(slow, 2.0);
  // Latency overlaps across commands in flight: 32 x 4 KiB take about one
  // latency, not 32.
  double lat = ReadBurst(io, 1, 32, kBlockSize);
  EXPECT_GE(lat, 0.00095);
  EXPECT_LT(lat, 0.016);
  // The slow device does not hold up the other one.
  auto bg = std::async(std::launch::async, [&] { return ReadBurst(io, 0, 32, kMiB); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  double other = ReadBurst(io, 1, 8, 64 << 10);
  EXPECT_LT(other, 0.1);
  EXPECT_GE(bg.get(), 0.33);
}

}  // namespace
}  // namespace kvfs::device
