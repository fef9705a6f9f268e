#include "io/scheduler.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/format.h"
#include "device/block_device.h"
#include "device/io_engine.h"
#include "util/temp_dir.h"

namespace kvfs::io {
namespace {

using device::BlockIo;
using device::IoOp;
using device::IoRequest;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kKiB = 1 << 10;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<char, FreeDeleter>;

AlignedBuf Aligned(size_t len) {
  return AlignedBuf(static_cast<char*>(std::aligned_alloc(kBlockSize, len)));
}

// `len` bytes of `byte`, aligned.
AlignedBuf Filled(size_t len, int byte) {
  AlignedBuf b = Aligned(len);
  std::memset(b.get(), byte, len);
  return b;
}

void FillPattern(char* p, size_t len, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i + 8 <= len; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
}

// Set while this thread is inside Scheduler::Submit(): a `done` that sees it
// ran inline.
thread_local bool tls_in_submit = false;
std::atomic<int> g_inline_done{0};

void SubmitMarked(Scheduler& s, Lane lane, std::span<IoRequest> reqs, CancelFlag cancel = nullptr) {
  tls_in_submit = true;
  s.Submit(lane, reqs, std::move(cancel));
  tls_in_submit = false;
}

void NoteNotInline() {
  if (tls_in_submit) g_inline_done++;
}

CancelFlag NewFlag() { return std::make_shared<std::atomic<bool>>(false); }

// Counts down; Wait() returns at zero (or fails the test after `secs`).
class Latch {
 public:
  explicit Latch(size_t n) : left_(n) {}
  void Arrive() {
    std::lock_guard<std::mutex> l(mu_);
    if (--left_ == 0) cv_.notify_all();
  }
  bool Wait(int secs = 20) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(secs), [this] { return left_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t left_;
};

uint32_t CommandsOf(const IoRequest& r, uint64_t command_bytes) {
  if (r.op == IoOp::kFlush || r.len <= command_bytes) return 1;
  return static_cast<uint32_t>((r.len + command_bytes - 1) / command_bytes);
}

// Passes requests to the real engine and records, per class (the test says
// which class a request belongs to), the most commands, bytes and requests
// in flight at once, and whether bytes ever exceeded a limit with more than
// one request in flight.
class CountingIo : public BlockIo {
 public:
  static constexpr size_t kClasses = kLaneCount + 1;  // lanes + "all"
  struct Peak {
    uint32_t requests = 0, commands = 0;
    uint64_t bytes = 0;
  };

  CountingIo(BlockIo& inner, uint64_t command_bytes, std::function<size_t(const IoRequest&)> cls)
      : inner_(inner), command_bytes_(command_bytes), cls_(std::move(cls)) {}

  void Submit(std::span<IoRequest> reqs) override {
    std::vector<IoRequest> down;
    for (IoRequest& r : reqs) {
      const size_t c = cls_(r);
      const uint32_t cmds = CommandsOf(r, command_bytes_);
      const uint64_t len = r.len;
      {
        std::lock_guard<std::mutex> l(mu_);
        for (size_t k : {c, kLaneCount}) {
          now_[k].requests++;
          now_[k].commands += cmds;
          now_[k].bytes += len;
          peak_[k].requests = std::max(peak_[k].requests, now_[k].requests);
          peak_[k].commands = std::max(peak_[k].commands, now_[k].commands);
          peak_[k].bytes = std::max(peak_[k].bytes, now_[k].bytes);
          if (now_[k].requests > 1) {
            multi_peak_bytes_[k] = std::max(multi_peak_bytes_[k], now_[k].bytes);
          }
        }
        seen_++;
      }
      r.done = [this, c, cmds, len, done = std::move(r.done)](Status st) {
        {
          // Before the scheduler's `done`: it frees room and dispatches the
          // next request, which must not be counted on top of this one.
          std::lock_guard<std::mutex> l(mu_);
          for (size_t k : {c, kLaneCount}) {
            now_[k].requests--;
            now_[k].commands -= cmds;
            now_[k].bytes -= len;
          }
        }
        done(std::move(st));
      };
      down.push_back(std::move(r));
    }
    inner_.Submit(down);
  }
  uint32_t device_count() const override { return inner_.device_count(); }

  Peak peak(size_t k) const {
    std::lock_guard<std::mutex> l(mu_);
    return peak_[k];
  }
  // Most bytes in flight at a moment when more than one request was.
  uint64_t multi_peak_bytes(size_t k) const {
    std::lock_guard<std::mutex> l(mu_);
    return multi_peak_bytes_[k];
  }
  uint64_t seen() const {
    std::lock_guard<std::mutex> l(mu_);
    return seen_;
  }

 private:
  BlockIo& inner_;
  const uint64_t command_bytes_;
  std::function<size_t(const IoRequest&)> cls_;
  mutable std::mutex mu_;
  std::array<Peak, kClasses> now_{};               // GUARDED_BY(mu_)
  std::array<Peak, kClasses> peak_{};              // GUARDED_BY(mu_)
  std::array<uint64_t, kClasses> multi_peak_bytes_{};  // GUARDED_BY(mu_)
  uint64_t seen_ = 0;                              // GUARDED_BY(mu_)
};

// Parks every request that reaches it until the test releases it, then
// passes it to the real engine. Records the order in which requests arrive
// (by byte_off, which the tests make unique).
class GateIo : public BlockIo {
 public:
  explicit GateIo(BlockIo& inner) : inner_(inner) {}
  // Waits until every request that came through has finished its `done`
  // (the wrapper below still touches the gate after the scheduler's `done`).
  ~GateIo() override {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return completed_ == arrivals_.size(); });
  }

  void Submit(std::span<IoRequest> reqs) override {
    std::vector<IoRequest> pass;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (IoRequest& r : reqs) {
        arrivals_.push_back(r.byte_off);
        Wrap(r);
        if (open_) {
          pass.push_back(std::move(r));
        } else {
          parked_.push_back(std::move(r));
        }
      }
    }
    if (!pass.empty()) inner_.Submit(pass);
  }
  uint32_t device_count() const override { return inner_.device_count(); }

  // Passes the oldest parked request down and waits until its `done` (the
  // scheduler's) has returned, so that whatever the scheduler dispatched in
  // reaction has arrived here.
  void ReleaseOne() {
    IoRequest r;
    uint64_t want;
    {
      std::lock_guard<std::mutex> l(mu_);
      ASSERT_FALSE(parked_.empty());
      r = std::move(parked_.front());
      parked_.pop_front();
      want = ++released_;
    }
    inner_.Submit(std::span<IoRequest>(&r, 1));
    std::unique_lock<std::mutex> l(mu_);
    ASSERT_TRUE(cv_.wait_for(l, std::chrono::seconds(30), [&] { return completed_ >= want; }));
  }
  // Lets everything parked, and everything later, through.
  void Open() {
    std::vector<IoRequest> pass;
    {
      std::lock_guard<std::mutex> l(mu_);
      open_ = true;
      for (auto& r : parked_) pass.push_back(std::move(r));
      parked_.clear();
    }
    if (!pass.empty()) inner_.Submit(pass);
  }
  std::vector<uint64_t> arrivals() const {
    std::lock_guard<std::mutex> l(mu_);
    return arrivals_;
  }
  size_t parked() const {
    std::lock_guard<std::mutex> l(mu_);
    return parked_.size();
  }

 private:
  void Wrap(IoRequest& r) {  // REQUIRES: mu_ held
    r.done = [this, done = std::move(r.done)](Status st) {
      done(std::move(st));
      // Notified under mu_: the destructor cannot finish before this does.
      std::lock_guard<std::mutex> l(mu_);
      completed_++;
      cv_.notify_all();
    };
  }

  BlockIo& inner_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<IoRequest> parked_;     // GUARDED_BY(mu_)
  std::vector<uint64_t> arrivals_;   // GUARDED_BY(mu_)
  bool open_ = false;                // GUARDED_BY(mu_)
  uint64_t released_ = 0;            // GUARDED_BY(mu_)
  uint64_t completed_ = 0;           // GUARDED_BY(mu_)
};

// Opens the gate when it goes out of scope: declared after the scheduler, so
// that a failed ASSERT does not leave the scheduler's destructor waiting for
// parked requests forever.
class OpenAtExit {
 public:
  explicit OpenAtExit(GateIo& gate) : gate_(gate) {}
  ~OpenAtExit() { gate_.Open(); }

 private:
  GateIo& gate_;
};

class SchedulerTest : public ::testing::Test {
 protected:
  // An image of `bytes` (sparse unless `allocate`) and a real engine on it.
  void OpenImage(uint64_t bytes, bool allocate = true) {
    ASSERT_FALSE(dir_.path().empty());
    const std::string path = dir_.Join("img");
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
    if (allocate) {
      ASSERT_EQ(::fallocate(fd, 0, 0, static_cast<off_t>(bytes)), 0);
    }
    ::close(fd);
    auto dev = device::BlockDevice::Open(path, false);
    ASSERT_TRUE(dev.ok()) << dev.status().ToString();
    dev_ = std::move(dev).value();
    device::IoEngineOptions eo;
    eo.rings = 2;
    eo.queue_depth = 64;
    eo.staging_pool_bytes = 0;  // the tests use their own buffers
    auto engine = device::IoEngine::Create({dev_.get()}, eo);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }

  void TearDown() override { EXPECT_EQ(g_inline_done.exchange(0), 0) << "a done ran inline"; }

  testing::TempDir dir_;
  std::unique_ptr<device::BlockDevice> dev_;
  std::unique_ptr<device::IoEngine> engine_;
};

// Options with every lane small, for tests that want to see bounds bite.
SchedulerOptions SmallOptions() {
  SchedulerOptions o;
  o.device_commands = 16;
  o.command_bytes = kMiB;
  for (auto& l : o.limits) l = {4, 4 * kMiB};
  return o;
}

TEST(SchedulerOptionsTest, DefaultsAreValidAndKeepRoomForReads) {
  SchedulerOptions o;
  EXPECT_TRUE(o.Validate().ok()) << o.Validate().ToString();
  device::IoEngineOptions eo;
  eo.rings = 2;
  SchedulerOptions e = SchedulerOptions::ForEngine(eo);
  EXPECT_EQ(e.device_commands, 2u * eo.queue_depth);
  EXPECT_EQ(e.command_bytes, eo.max_command_bytes);
  EXPECT_TRUE(e.Validate().ok());
  eo.rings = 0;  // unresolved: counted as the engine's fewest, 2
  EXPECT_EQ(SchedulerOptions::ForEngine(eo).device_commands, 2u * eo.queue_depth);
  for (uint32_t c : {3u, 8u, 64u, 128u, 512u, 4096u}) {
    SchedulerOptions d;
    d.device_commands = c;
    d.limits = DefaultLaneLimits(c);
    EXPECT_TRUE(d.Validate().ok()) << c << ": " << d.Validate().ToString();
  }
}

TEST(SchedulerOptionsTest, WritePlusPrefetchFillingTheDeviceIsRejected) {
  SchedulerOptions o = SmallOptions();
  o.limits[LaneIndex(Lane::kWrite)].max_commands = 10;
  o.limits[LaneIndex(Lane::kPrefetch)].max_commands = 6;  // 16 == device_commands
  Status st = o.Validate();
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.context().find("write + prefetch"), std::string::npos) << st.ToString();
  o.limits[LaneIndex(Lane::kPrefetch)].max_commands = 5;
  EXPECT_TRUE(o.Validate().ok());
  o.limits[LaneIndex(Lane::kMeta)].max_bytes = 0;
  EXPECT_EQ(o.Validate().code(), EINVAL);
  o = SmallOptions();
  o.command_bytes = 1000;
  EXPECT_EQ(o.Validate().code(), EINVAL);
}

TEST(LaneTest, NamesAndPriority) {
  EXPECT_STREQ(LaneName(Lane::kMeta), "meta");
  EXPECT_STREQ(LaneName(Lane::kRead), "read");
  EXPECT_STREQ(LaneName(Lane::kPrefetch), "prefetch");
  EXPECT_STREQ(LaneName(Lane::kWrite), "write");
  EXPECT_STREQ(LaneName(Lane::kDelete), "delete");
  EXPECT_EQ(kLanePriority[0], Lane::kRead);
  EXPECT_EQ(kLanePriority[kLaneCount - 1], Lane::kPrefetch);
}

// 1000 writes of mixed sizes on the write lane, then the same ranges read
// back on the read lane: neither lane ever exceeds its command or byte
// bound (a request over the byte bound goes only alone), and every byte
// reads back as written.
TEST_F(SchedulerTest, LaneBoundsHoldFor1000RequestsAndDataReadsBack) {
  constexpr size_t kN = 1000;
  std::mt19937_64 rng(7);
  std::vector<uint64_t> off(kN), len(kN);
  uint64_t pos = 0;
  for (size_t i = 0; i < kN; ++i) {
    // Mostly 4..256 KiB; every 40th is 2 MiB, larger than the byte bounds.
    len[i] = i % 40 == 39 ? 2 * kMiB : (1 + rng() % 64) * 4 * kKiB;
    off[i] = pos;
    pos += len[i];
  }
  ASSERT_NO_FATAL_FAILURE(OpenImage(AlignUp(pos, kMiB)));

  SchedulerOptions o = SmallOptions();
  const LaneLimit wl{8, 1 * kMiB}, rl{6, 768 * kKiB};
  o.limits[LaneIndex(Lane::kWrite)] = wl;
  o.limits[LaneIndex(Lane::kRead)] = rl;
  // Ops tell their lane by direction: writes on kWrite, reads on kRead.
  CountingIo counting(*engine_, o.command_bytes, [](const IoRequest& r) {
    return LaneIndex(r.op == IoOp::kWrite ? Lane::kWrite : Lane::kRead);
  });
  AlignedBuf src = Aligned(pos), dst = Aligned(pos);
  FillPattern(src.get(), pos, 99);
  std::memset(dst.get(), 0, pos);
  {
    Scheduler sched(counting, o);
    for (IoOp op : {IoOp::kWrite, IoOp::kRead}) {
      Latch latch(kN);
      std::atomic<int> failures{0};
      std::vector<IoRequest> reqs(kN);
      for (size_t i = 0; i < kN; ++i) {
        char* base = op == IoOp::kWrite ? src.get() : dst.get();
        reqs[i] = IoRequest{op, 0, off[i], base + off[i], len[i], [&](Status st) {
                              NoteNotInline();
                              if (!st.ok()) failures++;
                              latch.Arrive();
                            }};
      }
      // In a few batches, as a caller would.
      for (size_t i = 0; i < kN; i += 100) {
        SubmitMarked(sched, op == IoOp::kWrite ? Lane::kWrite : Lane::kRead,
                     std::span<IoRequest>(reqs.data() + i, 100));
      }
      ASSERT_TRUE(latch.Wait());
      EXPECT_EQ(failures.load(), 0);
    }
    auto snap = sched.Snapshot();
    const LaneSnapshot& w = snap[LaneIndex(Lane::kWrite)];
    EXPECT_EQ(w.ops, kN);
    EXPECT_EQ(w.bytes, pos);
    EXPECT_EQ(w.errors, 0u);
    EXPECT_EQ(w.latency.count(), kN);
    EXPECT_EQ(w.inflight, 0u);
    EXPECT_EQ(w.queued, 0u);
    EXPECT_EQ(snap[LaneIndex(Lane::kRead)].ops, kN);
    EXPECT_EQ(snap[LaneIndex(Lane::kRead)].bytes, pos);
  }
  for (auto [lane, limit] : {std::pair{Lane::kWrite, wl}, std::pair{Lane::kRead, rl}}) {
    SCOPED_TRACE(LaneName(lane));
    CountingIo::Peak p = counting.peak(LaneIndex(lane));
    EXPECT_LE(p.commands, limit.max_commands);
    EXPECT_LE(counting.multi_peak_bytes(LaneIndex(lane)), limit.max_bytes);
    // The bounds were reached, or the test proves nothing.
    EXPECT_GE(p.commands, limit.max_commands - 1);
    EXPECT_GT(counting.multi_peak_bytes(LaneIndex(lane)), limit.max_bytes / 2);
  }
  EXPECT_EQ(std::memcmp(src.get(), dst.get(), pos), 0) << "read back differs";
}

// Many lanes at once: the total never exceeds device_commands.
TEST_F(SchedulerTest, DeviceBoundHoldsAcrossLanes) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(16 * kMiB));
  SchedulerOptions o = SmallOptions();  // 16 device commands
  o.device_commands = 10;
  for (auto& l : o.limits) l = {6, 64 * kMiB};
  o.limits[LaneIndex(Lane::kWrite)].max_commands = 3;
  o.limits[LaneIndex(Lane::kPrefetch)].max_commands = 3;
  CountingIo counting(*engine_, o.command_bytes, [](const IoRequest& r) {
    return static_cast<size_t>(r.byte_off / (2 * kMiB));  // each lane its own 2 MiB
  });
  AlignedBuf buf = Aligned(16 * kMiB);
  std::memset(buf.get(), 1, 16 * kMiB);
  constexpr size_t kPerLane = 200;
  Latch latch(kPerLane * kLaneCount);
  {
    Scheduler sched(counting, o);
    for (size_t round = 0; round < kPerLane; round += 20) {
      for (size_t li = 0; li < kLaneCount; ++li) {
        std::vector<IoRequest> reqs;
        for (size_t k = 0; k < 20; ++k) {
          uint64_t o2 = li * 2 * kMiB + ((round + k) % 32) * 64 * kKiB;
          reqs.push_back(IoRequest{li == LaneIndex(Lane::kWrite) ? IoOp::kWrite : IoOp::kRead, 0,
                                   o2, buf.get() + o2, 64 * kKiB, [&](Status st) {
                                     EXPECT_TRUE(st.ok()) << st.ToString();
                                     latch.Arrive();
                                   }});
        }
        sched.Submit(static_cast<Lane>(li), reqs);
      }
    }
    ASSERT_TRUE(latch.Wait());
  }
  EXPECT_LE(counting.peak(kLaneCount).commands, o.device_commands);
  EXPECT_GE(counting.peak(kLaneCount).commands, o.device_commands - 1);
  for (size_t li = 0; li < kLaneCount; ++li) {
    EXPECT_LE(counting.peak(li).commands, o.limits[li].max_commands) << LaneName(Lane(li));
  }
}

// With the write and prefetch lanes full at a parked device and more of both
// queued, a read goes to the device at once; once the device is full too,
// every slot that frees goes to queued reads, then meta, then delete, and
// only then to the writes and prefetches queued long before.
TEST_F(SchedulerTest, FreedCapacityGoesToReadsThenMetaThenDeleteBeforeWritesAndPrefetch) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  GateIo gate(*engine_);
  SchedulerOptions o = SmallOptions();
  o.device_commands = 8;
  for (auto& l : o.limits) l = {8, 64 * kMiB};
  o.limits[LaneIndex(Lane::kWrite)].max_commands = 4;
  o.limits[LaneIndex(Lane::kPrefetch)].max_commands = 2;
  AlignedBuf buf = Aligned(8 * kMiB);
  std::memset(buf.get(), 7, 8 * kMiB);
  // Lane L's requests live at [L MiB, L+1 MiB): the offset tells the lane.
  auto off_of = [](Lane l, size_t i) { return LaneIndex(l) * kMiB + i * 4 * kKiB; };
  auto lane_of = [](uint64_t off) { return static_cast<Lane>(off / kMiB); };
  std::atomic<int> completed{0};
  auto make = [&](Lane l, size_t first, size_t n) {
    std::vector<IoRequest> v;
    for (size_t i = first; i < first + n; ++i) {
      IoOp op = l == Lane::kWrite ? IoOp::kWrite : IoOp::kRead;
      v.push_back(IoRequest{op, 0, off_of(l, i), buf.get() + off_of(l, i), 4 * kKiB,
                            [&](Status st) {
                              NoteNotInline();
                              EXPECT_TRUE(st.ok()) << st.ToString();
                              completed++;
                            }});
    }
    return v;
  };
  {
    Scheduler sched(gate, o);
    OpenAtExit open_gate(gate);
    auto w = make(Lane::kWrite, 0, 20);
    SubmitMarked(sched, Lane::kWrite, w);
    auto p = make(Lane::kPrefetch, 0, 10);
    SubmitMarked(sched, Lane::kPrefetch, p);
    ASSERT_EQ(gate.arrivals().size(), 6u);  // 4 writes + 2 prefetches, the rest queued

    // A read during the burst reaches the device inside Submit().
    auto r0 = make(Lane::kRead, 0, 2);
    SubmitMarked(sched, Lane::kRead, r0);
    ASSERT_EQ(gate.arrivals().size(), 8u);
    EXPECT_EQ(lane_of(gate.arrivals()[6]), Lane::kRead);
    EXPECT_EQ(lane_of(gate.arrivals()[7]), Lane::kRead);

    // The device is full (8): these all queue.
    auto r1 = make(Lane::kRead, 2, 3);
    auto m = make(Lane::kMeta, 0, 2);
    auto d = make(Lane::kDelete, 0, 2);
    SubmitMarked(sched, Lane::kDelete, d);  // submitted lowest first on purpose
    SubmitMarked(sched, Lane::kMeta, m);
    SubmitMarked(sched, Lane::kRead, r1);
    ASSERT_EQ(gate.arrivals().size(), 8u);
    auto snap = sched.Snapshot();
    EXPECT_EQ(snap[LaneIndex(Lane::kRead)].queued, 3u);
    EXPECT_EQ(snap[LaneIndex(Lane::kWrite)].queued, 16u);
    EXPECT_EQ(snap[LaneIndex(Lane::kWrite)].inflight, 4u);

    // One slot at a time: 7 slots go to 3 reads, 2 meta, 2 delete.
    for (int k = 0; k < 7; ++k) ASSERT_NO_FATAL_FAILURE(gate.ReleaseOne());
    std::vector<uint64_t> a = gate.arrivals();
    ASSERT_EQ(a.size(), 15u);
    std::vector<Lane> order;
    for (size_t k = 8; k < a.size(); ++k) order.push_back(lane_of(a[k]));
    EXPECT_EQ(order, (std::vector<Lane>{Lane::kRead, Lane::kRead, Lane::kRead, Lane::kMeta,
                                        Lane::kMeta, Lane::kDelete, Lane::kDelete}));
    gate.Open();
  }  // the destructor drains the rest
  EXPECT_EQ(completed.load(), 20 + 10 + 5 + 2 + 2);
}

// Both background lanes under their own bounds, the device full of reads:
// freed slots go to queued writes before queued prefetches.
TEST_F(SchedulerTest, FreedCapacityGoesToWritesBeforePrefetch) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  GateIo gate(*engine_);
  SchedulerOptions o = SmallOptions();
  o.device_commands = 8;
  for (auto& l : o.limits) l = {8, 64 * kMiB};
  o.limits[LaneIndex(Lane::kWrite)].max_commands = 4;  // 1 while reads are busy
  o.limits[LaneIndex(Lane::kPrefetch)].max_commands = 3;
  AlignedBuf buf = Aligned(8 * kMiB);
  std::memset(buf.get(), 3, 8 * kMiB);
  auto off_of = [](Lane l, size_t i) { return LaneIndex(l) * kMiB + i * 4 * kKiB; };
  std::atomic<int> completed{0};
  auto make = [&](Lane l, size_t n) {
    std::vector<IoRequest> v;
    for (size_t i = 0; i < n; ++i) {
      IoOp op = l == Lane::kWrite ? IoOp::kWrite : IoOp::kRead;
      v.push_back(IoRequest{op, 0, off_of(l, i), buf.get() + off_of(l, i), 4 * kKiB,
                            [&](Status st) {
                              EXPECT_TRUE(st.ok());
                              completed++;
                            }});
    }
    return v;
  };
  {
    Scheduler sched(gate, o);
    OpenAtExit open_gate(gate);
    auto r = make(Lane::kRead, 8);
    sched.Submit(Lane::kRead, r);
    auto p = make(Lane::kPrefetch, 3);  // queued first
    sched.Submit(Lane::kPrefetch, p);
    auto w = make(Lane::kWrite, 3);
    sched.Submit(Lane::kWrite, w);
    ASSERT_EQ(gate.arrivals().size(), 8u);
    for (int k = 0; k < 6; ++k) ASSERT_NO_FATAL_FAILURE(gate.ReleaseOne());
    // Freed room: the write lane first, at its bound while reads are busy
    // (a quarter of 4), then prefetch.
    std::vector<uint64_t> a = gate.arrivals();
    ASSERT_EQ(a.size(), 12u);
    EXPECT_EQ(a[8] / kMiB, LaneIndex(Lane::kWrite));
    for (size_t k = 9; k < 12; ++k) EXPECT_EQ(a[k] / kMiB, LaneIndex(Lane::kPrefetch)) << k;
    gate.Open();
  }
  EXPECT_EQ(completed.load(), 14);
}

// A queued prefetch that a reader waits for (Promote with its group) goes
// to the read lane and past the prefetches queued before it; dispatched
// requests and other groups stay where they are.
TEST_F(SchedulerTest, PromotedPrefetchOvertakesTheRestOfThePrefetchQueue) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  GateIo gate(*engine_);
  SchedulerOptions o = SmallOptions();
  o.limits[LaneIndex(Lane::kPrefetch)] = {2, 64 * kMiB};
  AlignedBuf buf = Filled(kMiB, 5);
  int groups[6];
  std::mutex mu;
  std::vector<int> codes(6, -1);
  Latch latch(6);
  std::vector<IoRequest> p;
  for (int i = 0; i < 6; ++i) {
    IoRequest r{IoOp::kRead, 0, uint64_t(i) * 4 * kKiB, buf.get() + i * 4 * kKiB, 4 * kKiB,
                [&, i](Status st) {
                  NoteNotInline();
                  {
                    std::lock_guard<std::mutex> l(mu);
                    codes[i] = st.code();
                  }
                  latch.Arrive();
                }};
    r.group = &groups[i < 5 ? i : 4];  // the last two share a group
    p.push_back(std::move(r));
  }
  {
    Scheduler sched(gate, o);
    OpenAtExit open_gate(gate);
    sched.Submit(Lane::kPrefetch, p);  // 0 and 1 dispatched (parked), 2-5 queued
    ASSERT_EQ(gate.arrivals().size(), 2u);
    EXPECT_EQ(sched.Promote(nullptr), 0u);
    EXPECT_EQ(sched.Promote(&groups[0]), 0u);  // dispatched already
    EXPECT_EQ(sched.Promote(&groups[4]), 2u);  // 4 and 5, in order, at once
    std::vector<uint64_t> a = gate.arrivals();
    ASSERT_EQ(a.size(), 4u);
    EXPECT_EQ(a[2], 4 * 4 * kKiB);
    EXPECT_EQ(a[3], 5 * 4 * kKiB);
    auto snap = sched.Snapshot();
    EXPECT_EQ(snap[LaneIndex(Lane::kPrefetch)].promoted, 2u);
    EXPECT_EQ(snap[LaneIndex(Lane::kPrefetch)].queued, 2u);  // 2 and 3 wait their turn
    EXPECT_EQ(snap[LaneIndex(Lane::kRead)].inflight, 2u);
    gate.Open();
    ASSERT_TRUE(latch.Wait());
    snap = sched.Snapshot();
    EXPECT_EQ(snap[LaneIndex(Lane::kRead)].ops, 2u);
    EXPECT_EQ(snap[LaneIndex(Lane::kPrefetch)].ops, 4u);
  }
  EXPECT_EQ(codes, std::vector<int>(6, 0));
}

// While a read is queued or in flight, write-behind starts only a quarter
// of its commands; once reads are done it gets its whole bound back.
TEST_F(SchedulerTest, WriteLaneYieldsWhileReadsAreBusy) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  GateIo gate(*engine_);
  SchedulerOptions o = SmallOptions();
  o.limits[LaneIndex(Lane::kWrite)] = {8, 64 * kMiB};
  AlignedBuf buf = Filled(kMiB, 7);
  Latch latch(7);
  auto req = [&](IoOp op, uint64_t off) {
    return IoRequest{op, 0, off, buf.get(), 4 * kKiB, [&](Status st) {
                       NoteNotInline();
                       EXPECT_TRUE(st.ok());
                       latch.Arrive();
                     }};
  };
  {
    Scheduler sched(gate, o);
    OpenAtExit open_gate(gate);
    std::vector<IoRequest> r{req(IoOp::kRead, 0)};
    SubmitMarked(sched, Lane::kRead, r);  // parked: reads are busy
    std::vector<IoRequest> w;
    for (uint64_t i = 1; i <= 6; ++i) w.push_back(req(IoOp::kWrite, i * 4 * kKiB));
    SubmitMarked(sched, Lane::kWrite, w);
    EXPECT_EQ(gate.arrivals().size(), 3u);  // the read and 8 / 4 writes
    EXPECT_EQ(sched.Snapshot()[LaneIndex(Lane::kWrite)].queued, 4u);
    ASSERT_NO_FATAL_FAILURE(gate.ReleaseOne());  // the read completes
    EXPECT_EQ(gate.arrivals().size(), 7u);       // the other four writes go
    gate.Open();
    ASSERT_TRUE(latch.Wait());
  }
}

// A read too large for the device room left waits at the head of its lane,
// and smaller requests of lower lanes that would fit do not overtake it:
// the room that frees up is kept for the read.
TEST_F(SchedulerTest, LargeReadWaitingForDeviceRoomIsNotOvertakenByLowerLanes) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(16 * kMiB));
  GateIo gate(*engine_);
  SchedulerOptions o = SmallOptions();
  o.device_commands = 8;
  for (auto& l : o.limits) l = {8, 64 * kMiB};
  o.limits[LaneIndex(Lane::kWrite)].max_commands = 4;
  o.limits[LaneIndex(Lane::kPrefetch)].max_commands = 2;
  AlignedBuf buf = Aligned(16 * kMiB);
  std::memset(buf.get(), 4, 16 * kMiB);
  Latch latch(4 + 2 + 1 + 2);
  auto done = [&](Status st) {
    EXPECT_TRUE(st.ok()) << st.ToString();
    latch.Arrive();
  };
  auto small = [&](IoOp op, uint64_t off) {
    return IoRequest{op, 0, off, buf.get() + off, 4 * kKiB, done};
  };
  {
    Scheduler sched(gate, o);
    OpenAtExit open_gate(gate);
    std::vector<IoRequest> w, p;
    for (int i = 0; i < 4; ++i) w.push_back(small(IoOp::kWrite, i * 4 * kKiB));
    for (int i = 0; i < 2; ++i) p.push_back(small(IoOp::kRead, kMiB + i * 4 * kKiB));
    sched.Submit(Lane::kWrite, w);
    sched.Submit(Lane::kPrefetch, p);
    ASSERT_EQ(gate.arrivals().size(), 6u);  // 6 of 8 commands in flight
    // 4 commands: does not fit in the 2 left.
    std::vector<IoRequest> r{{IoOp::kRead, 0, 8 * kMiB, buf.get() + 8 * kMiB, 4 * kMiB, done}};
    sched.Submit(Lane::kRead, r);
    std::vector<IoRequest> m{small(IoOp::kRead, 2 * kMiB), small(IoOp::kRead, 2 * kMiB + 4 * kKiB)};
    sched.Submit(Lane::kMeta, m);
    EXPECT_EQ(gate.arrivals().size(), 6u) << "meta overtook the waiting read";
    ASSERT_NO_FATAL_FAILURE(gate.ReleaseOne());  // 5 in flight: still no room for 4
    EXPECT_EQ(gate.arrivals().size(), 6u);
    ASSERT_NO_FATAL_FAILURE(gate.ReleaseOne());  // 4 in flight: the read goes
    ASSERT_EQ(gate.arrivals().size(), 7u);
    EXPECT_EQ(gate.arrivals()[6], 8 * kMiB);
    gate.Open();
    ASSERT_TRUE(latch.Wait());
  }
}

// A request larger than its lane's byte bound still goes when the lane is
// idle, alone; the small one behind it waits for it.
TEST_F(SchedulerTest, OversizedRequestGoesAloneWhenItsLaneIsIdle) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  GateIo gate(*engine_);
  SchedulerOptions o = SmallOptions();
  o.limits[LaneIndex(Lane::kWrite)] = {4, 1 * kMiB};
  AlignedBuf buf = Aligned(8 * kMiB);
  std::memset(buf.get(), 5, 8 * kMiB);
  Latch latch(3);
  auto done = [&](Status st) {
    EXPECT_TRUE(st.ok());
    latch.Arrive();
  };
  {
    Scheduler sched(gate, o);
    OpenAtExit open_gate(gate);
    std::vector<IoRequest> v{{IoOp::kWrite, 0, 0, buf.get(), 4 * kMiB, done},
                             {IoOp::kWrite, 0, 4 * kMiB, buf.get(), 4 * kKiB, done}};
    sched.Submit(Lane::kWrite, v);
    EXPECT_EQ(gate.arrivals(), std::vector<uint64_t>{0});
    auto snap = sched.Snapshot()[LaneIndex(Lane::kWrite)];
    EXPECT_EQ(snap.inflight_commands, 4u);
    EXPECT_EQ(snap.inflight_bytes, 4 * kMiB);
    EXPECT_EQ(snap.queued, 1u);
    ASSERT_NO_FATAL_FAILURE(gate.ReleaseOne());
    EXPECT_EQ(gate.arrivals(), (std::vector<uint64_t>{0, 4 * kMiB}));
    // A flush costs one command and no bytes.
    std::vector<IoRequest> f{{IoOp::kFlush, 0, 0, nullptr, 0, done}};
    sched.Submit(Lane::kWrite, f);
    EXPECT_EQ(gate.arrivals().size(), 3u);
    gate.Open();
    ASSERT_TRUE(latch.Wait());
  }
}

// The restore-during-a-write-burst case on the real engine: 2 GiB of
// write-behind queued, then one read. The read completes while nearly all
// of the writes are still to come.
TEST_F(SchedulerTest, ReadDuringTwoGiBWriteBurstCompletesBeforeTheWrites) {
  constexpr uint64_t kWriteBytes = 4 * kMiB;
  constexpr size_t kWrites = 512;  // 2 GiB
  constexpr uint64_t kReadOff = 2048 * kMiB + 64 * kMiB;
  ASSERT_NO_FATAL_FAILURE(OpenImage(2560 * kMiB, /*allocate=*/false));
  Scheduler sched(*engine_, SchedulerOptions::ForEngine(engine_->options()));

  AlignedBuf expect = Aligned(kMiB), got = Aligned(kMiB), wbuf = Aligned(kWriteBytes);
  FillPattern(expect.get(), kMiB, 5);
  FillPattern(wbuf.get(), kWriteBytes, 6);
  std::memset(got.get(), 0, kMiB);
  ASSERT_TRUE(sched.WriteSync(Lane::kWrite, 0, kReadOff, expect.get(), kMiB).ok());

  std::atomic<size_t> writes_done{0};
  std::atomic<size_t> writes_cancelled{0};
  Latch writes(kWrites);
  CancelFlag burst = NewFlag();
  std::vector<IoRequest> w(kWrites);
  for (size_t i = 0; i < kWrites; ++i) {
    w[i] = IoRequest{IoOp::kWrite, 0, i * kWriteBytes, wbuf.get(), kWriteBytes, [&](Status st) {
                       if (st.code() == ECANCELED) {
                         writes_cancelled++;
                       } else {
                         EXPECT_TRUE(st.ok()) << st.ToString();
                         writes_done++;
                       }
                       writes.Arrive();
                     }};
  }
  sched.Submit(Lane::kWrite, w, burst);
  // Let the burst get going (the device busy with writes), without sleeping
  // on a guess: wait for the first few writes to land.
  while (writes_done.load() < 8) std::this_thread::yield();

  std::atomic<size_t> writes_done_at_read{0};
  Latch read(1);
  const auto t0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration read_time{};
  std::vector<IoRequest> r{{IoOp::kRead, 0, kReadOff, got.get(), kMiB, [&](Status st) {
                              EXPECT_TRUE(st.ok()) << st.ToString();
                              read_time = std::chrono::steady_clock::now() - t0;
                              writes_done_at_read = writes_done.load();
                              read.Arrive();
                            }}};
  sched.Submit(Lane::kRead, r);
  ASSERT_TRUE(read.Wait());
  const auto snap = sched.Snapshot()[LaneIndex(Lane::kWrite)];
  std::printf("read took %.2f ms; %zu of %zu writes were done, %u queued\n",
              std::chrono::duration<double, std::milli>(read_time).count(),
              writes_done_at_read.load(), kWrites, snap.queued);
  EXPECT_EQ(std::memcmp(expect.get(), got.get(), kMiB), 0);
  // Far from all: the read did not wait for the burst (a quarter is a wide
  // margin for a slow disk; typically a handful of writes finish meanwhile).
  EXPECT_LT(writes_done_at_read.load(), kWrites / 4);
  // End the burst early to keep the test short: what is queued is dropped.
  sched.Cancel(burst);
  ASSERT_TRUE(writes.Wait());
  EXPECT_GT(writes_cancelled.load(), 0u);
  EXPECT_EQ(sched.Snapshot()[LaneIndex(Lane::kWrite)].cancelled, writes_cancelled.load());
}

// A flag set while requests wait in the queue: they complete with ECANCELED
// when their turn comes, and the device never sees them.
TEST_F(SchedulerTest, RequestsCancelledWhileQueuedNeverReachTheDevice) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  GateIo gate(*engine_);
  CountingIo counting(gate, kMiB, [](const IoRequest&) { return size_t{0}; });
  SchedulerOptions o = SmallOptions();
  o.limits[LaneIndex(Lane::kWrite)] = {1, 64 * kMiB};
  AlignedBuf buf = Aligned(kMiB);
  std::memset(buf.get(), 9, kMiB);
  std::mutex mu;
  std::vector<int> codes(6, -1);
  Latch latch(6);
  auto req = [&](int i) {
    return IoRequest{IoOp::kWrite, 0, uint64_t(i) * 4 * kKiB, buf.get(), 4 * kKiB,
                     [&, i](Status st) {
                       NoteNotInline();
                       {
                         std::lock_guard<std::mutex> l(mu);
                         codes[i] = st.code();
                       }
                       latch.Arrive();
                     }};
  };
  {
    Scheduler sched(counting, o);
    OpenAtExit open_gate(gate);
    CancelFlag first = NewFlag(), rest = NewFlag();
    std::vector<IoRequest> a{req(0)};
    SubmitMarked(sched, Lane::kWrite, a, first);  // dispatched, parked
    std::vector<IoRequest> b{req(1), req(2), req(3), req(4)};
    SubmitMarked(sched, Lane::kWrite, b, rest);  // queued
    std::vector<IoRequest> c{req(5)};
    SubmitMarked(sched, Lane::kWrite, c);  // queued, no flag
    first->store(true);  // after dispatch: no effect
    rest->store(true);   // before dispatch: dropped at their turn
    EXPECT_EQ(sched.Snapshot()[LaneIndex(Lane::kWrite)].queued, 5u);
    ASSERT_NO_FATAL_FAILURE(gate.ReleaseOne());  // request 0 completes; 1-4 dropped; 5 goes
    ASSERT_NO_FATAL_FAILURE(gate.ReleaseOne());
    ASSERT_TRUE(latch.Wait());
    auto snap = sched.Snapshot()[LaneIndex(Lane::kWrite)];
    EXPECT_EQ(snap.cancelled, 4u);
    EXPECT_EQ(snap.ops, 2u);
  }
  EXPECT_EQ(codes, (std::vector<int>{0, ECANCELED, ECANCELED, ECANCELED, ECANCELED, 0}));
  EXPECT_EQ(counting.seen(), 2u);
  EXPECT_EQ(gate.arrivals(), (std::vector<uint64_t>{0, 5 * 4 * kKiB}));
}

// Cancel() drops queued requests at once, without waiting for room; a
// request already at the device completes normally and its data lands.
TEST_F(SchedulerTest, CancelDropsQueuedRequestsAtOnceButNotDispatchedOnes) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  GateIo gate(*engine_);
  SchedulerOptions o = SmallOptions();
  o.limits[LaneIndex(Lane::kWrite)] = {1, 64 * kMiB};
  AlignedBuf buf = Aligned(8 * kKiB), back = Aligned(4 * kKiB);
  FillPattern(buf.get(), 8 * kKiB, 11);
  std::atomic<int> cancelled{0}, ok{0};
  Latch dropped(3), all(4);
  auto done = [&](Status st) {
    NoteNotInline();
    if (st.code() == ECANCELED) {
      EXPECT_NE(st.context().find("cancelled before it was dispatched"), std::string::npos);
      cancelled++;
      dropped.Arrive();
    } else {
      EXPECT_TRUE(st.ok()) << st.ToString();
      ok++;
    }
    all.Arrive();
  };
  {
    Scheduler sched(gate, o);
    OpenAtExit open_gate(gate);
    CancelFlag f = NewFlag();
    std::vector<IoRequest> v;
    for (int i = 0; i < 4; ++i) {
      v.push_back({IoOp::kWrite, 0, uint64_t(i) * 4 * kKiB, buf.get(), 4 * kKiB, done});
    }
    SubmitMarked(sched, Lane::kWrite, v, f);  // 1 dispatched (parked), 3 queued
    ASSERT_EQ(gate.arrivals().size(), 1u);
    sched.Cancel(f);
    EXPECT_TRUE(f->load());
    ASSERT_TRUE(dropped.Wait());  // while request 0 is still parked
    EXPECT_EQ(sched.Snapshot()[LaneIndex(Lane::kWrite)].queued, 0u);
    EXPECT_EQ(gate.parked(), 1u);
    ASSERT_NO_FATAL_FAILURE(gate.ReleaseOne());
    ASSERT_TRUE(all.Wait());
    gate.Open();
    ASSERT_TRUE(sched.ReadSync(Lane::kRead, 0, 0, back.get(), 4 * kKiB).ok());
  }
  EXPECT_EQ(cancelled.load(), 3);
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(gate.arrivals().size(), 2u);  // request 0 and the read back
  EXPECT_EQ(std::memcmp(buf.get(), back.get(), 4 * kKiB), 0);
}

TEST_F(SchedulerTest, FlagAlreadySetAtSubmitCompletesWithEcanceledNotInline) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  CountingIo counting(*engine_, kMiB, [](const IoRequest&) { return size_t{0}; });
  AlignedBuf buf = Aligned(4 * kKiB);
  Latch latch(2);
  std::atomic<int> codes_sum{0};
  {
    Scheduler sched(counting, SmallOptions());
    CancelFlag f = NewFlag();
    f->store(true);
    std::vector<IoRequest> v{{IoOp::kRead, 0, 0, buf.get(), 4 * kKiB, nullptr},
                             {IoOp::kRead, 0, 4 * kKiB, buf.get(), 4 * kKiB, nullptr}};
    for (auto& r : v) {
      r.done = [&](Status st) {
        NoteNotInline();
        codes_sum += st.code();
        latch.Arrive();
      };
    }
    SubmitMarked(sched, Lane::kRead, v, f);
    ASSERT_TRUE(latch.Wait());
    EXPECT_EQ(sched.Snapshot()[LaneIndex(Lane::kRead)].cancelled, 2u);
  }
  EXPECT_EQ(codes_sum.load(), 2 * ECANCELED);
  EXPECT_EQ(counting.seen(), 0u);
}

TEST_F(SchedulerTest, UnknownLaneFailsWithEinvalNotInline) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  AlignedBuf buf = Aligned(4 * kKiB);
  Latch latch(1);
  int code = 0;
  {
    Scheduler sched(*engine_, SmallOptions());
    std::vector<IoRequest> v{{IoOp::kRead, 0, 0, buf.get(), 4 * kKiB, [&](Status st) {
                                NoteNotInline();
                                code = st.code();
                                latch.Arrive();
                              }}};
    SubmitMarked(sched, static_cast<Lane>(7), v);
    ASSERT_TRUE(latch.Wait());
  }
  EXPECT_EQ(code, EINVAL);
}

// Device errors reach `done` with their errno and are counted.
TEST_F(SchedulerTest, DeviceErrorsPassThroughAndAreCounted) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  AlignedBuf buf = Aligned(4 * kKiB);
  Scheduler sched(*engine_, SmallOptions());
  // Past the end of the device: the engine fails it with EINVAL.
  Status st = sched.ReadSync(Lane::kMeta, 0, 64 * kMiB, buf.get(), 4 * kKiB);
  EXPECT_EQ(st.code(), EINVAL) << st.ToString();
  auto snap = sched.Snapshot()[LaneIndex(Lane::kMeta)];
  EXPECT_EQ(snap.ops, 1u);
  EXPECT_EQ(snap.errors, 1u);
  EXPECT_EQ(snap.bytes, 0u);
  EXPECT_TRUE(sched.FlushSync(Lane::kWrite, 0).ok());
}

// The destructor returns only after every request, queued ones included,
// has completed and its callback returned; callbacks may submit more while
// it waits.
TEST_F(SchedulerTest, DestructorDrainsQueuedAndInFlightRequests) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(16 * kMiB));
  AlignedBuf buf = Aligned(16 * kMiB);
  std::memset(buf.get(), 2, 16 * kMiB);
  std::atomic<int> done_count{0};
  std::atomic<int> follow{0};
  constexpr int kInitial = 300, kFollowUps = 100;
  {
    SchedulerOptions o = SmallOptions();
    o.limits[LaneIndex(Lane::kWrite)] = {2, 64 * kMiB};
    o.limits[LaneIndex(Lane::kRead)] = {2, 64 * kMiB};
    Scheduler sched(*engine_, o);
    std::vector<IoRequest> v;
    for (int i = 0; i < kInitial; ++i) {
      const uint64_t off = uint64_t(i % 256) * 64 * kKiB;
      v.push_back({i % 2 ? IoOp::kWrite : IoOp::kRead, 0, off, buf.get() + off, 64 * kKiB,
                   [&, off](Status st) {
                     EXPECT_TRUE(st.ok()) << st.ToString();
                     if (follow.fetch_add(1) < kFollowUps) {
                       std::vector<IoRequest> more{{IoOp::kRead, 0, off, buf.get() + off,
                                                    4 * kKiB, [&](Status st2) {
                                                      EXPECT_TRUE(st2.ok());
                                                      done_count++;
                                                    }}};
                       sched.Submit(Lane::kRead, more);
                     }
                     done_count++;
                   }});
    }
    // Split over lanes, all queued behind bounds of 2.
    sched.Submit(Lane::kWrite, std::span<IoRequest>(v.data(), kInitial / 2));
    sched.Submit(Lane::kRead, std::span<IoRequest>(v.data() + kInitial / 2, kInitial / 2));
    EXPECT_GT(sched.Snapshot()[LaneIndex(Lane::kWrite)].queued, 0u);
  }
  EXPECT_EQ(done_count.load(), kInitial + kFollowUps);
}

// 8 threads submit on random lanes, some with flags that get set or
// Cancel()ed; every callback runs exactly once, never inline, and the lane
// counters add up.
TEST_F(SchedulerTest, EveryCallbackRunsExactlyOnceUnderEightSubmitters) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(64 * kMiB));
  constexpr int kThreads = 8, kPerThread = 400;
  std::vector<std::atomic<int>> calls(kThreads * kPerThread);
  AlignedBuf buf = Aligned(64 * kKiB * kThreads);
  Latch latch(kThreads * kPerThread);
  SchedulerOptions o = SmallOptions();
  for (auto& l : o.limits) l = {3, 256 * kKiB};
  Scheduler sched(*engine_, o);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      char* mine = buf.get() + t * 64 * kKiB;  // reads only: sharing is fine
      for (int i = 0; i < kPerThread;) {
        const int n = 1 + static_cast<int>(rng() % 8);
        CancelFlag f = rng() % 4 == 0 ? NewFlag() : nullptr;
        std::vector<IoRequest> v;
        for (int k = 0; k < n && i < kPerThread; ++k, ++i) {
          const int id = t * kPerThread + i;
          const uint64_t off = (rng() % (64 * kMiB / (16 * kKiB))) * 16 * kKiB;
          v.push_back({IoOp::kRead, 0, off, mine + (id % 4) * 16 * kKiB, 16 * kKiB,
                       [&, id](Status st) {
                         NoteNotInline();
                         EXPECT_TRUE(st.ok() || st.code() == ECANCELED) << st.ToString();
                         calls[id]++;
                         latch.Arrive();
                       }});
        }
        SubmitMarked(sched, static_cast<Lane>(rng() % kLaneCount), v, f);
        if (f && rng() % 2) {
          sched.Cancel(f);
        } else if (f) {
          f->store(true);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(latch.Wait());
  for (size_t id = 0; id < calls.size(); ++id) ASSERT_EQ(calls[id].load(), 1) << id;
  uint64_t total = 0, cancelled = 0;
  for (const LaneSnapshot& s : sched.Snapshot()) {
    total += s.ops + s.cancelled;
    cancelled += s.cancelled;
    EXPECT_EQ(s.errors, 0u);
  }
  EXPECT_EQ(total, calls.size());
  EXPECT_GT(cancelled, 0u);
}

// fs submits follow-up work from completions: a chain of 300 requests, each
// submitted from the previous one's `done`, on a lane bounded to one command
// with other requests competing for it.
TEST_F(SchedulerTest, SubmitFromInsideDoneWorks) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  AlignedBuf buf = Aligned(64 * kKiB);
  SchedulerOptions o = SmallOptions();
  o.limits[LaneIndex(Lane::kRead)] = {1, 64 * kMiB};
  Scheduler sched(*engine_, o);
  constexpr int kChain = 300;
  std::atomic<int> steps{0}, others{0};
  Latch latch(1);
  std::function<void(int)> step = [&](int i) {
    std::vector<IoRequest> v{{IoOp::kRead, 0, uint64_t(i % 64) * 4 * kKiB, buf.get(), 4 * kKiB,
                              [&, i](Status st) {
                                EXPECT_TRUE(st.ok()) << st.ToString();
                                steps++;
                                // Competing work on the same lane, then the next link.
                                std::vector<IoRequest> o2{{IoOp::kRead, 0, 0,
                                                           buf.get() + 4 * kKiB, 4 * kKiB,
                                                           [&](Status) { others++; }}};
                                sched.Submit(Lane::kRead, o2);
                                if (i + 1 < kChain) {
                                  step(i + 1);
                                } else {
                                  latch.Arrive();
                                }
                              }}};
    sched.Submit(Lane::kRead, v);
  };
  step(0);
  ASSERT_TRUE(latch.Wait());
  EXPECT_EQ(steps.load(), kChain);
  auto ls = sched.Snapshot()[LaneIndex(Lane::kRead)];
  EXPECT_GE(ls.ops, static_cast<uint64_t>(kChain));
}

TEST_F(SchedulerTest, LaneIoAdaptsALaneToBlockIo) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  Scheduler sched(*engine_, SmallOptions());
  LaneIo meta(sched, Lane::kMeta);
  AlignedBuf a = Aligned(8 * kKiB), b = Aligned(8 * kKiB);
  FillPattern(a.get(), 8 * kKiB, 3);
  ASSERT_TRUE(meta.WriteSync(0, 8 * kKiB, a.get(), 8 * kKiB).ok());
  ASSERT_TRUE(meta.ReadSync(0, 8 * kKiB, b.get(), 8 * kKiB).ok());
  EXPECT_EQ(std::memcmp(a.get(), b.get(), 8 * kKiB), 0);
  EXPECT_EQ(meta.device_count(), 1u);
  auto snap = sched.Snapshot()[LaneIndex(Lane::kMeta)];
  EXPECT_EQ(snap.ops, 2u);
  EXPECT_EQ(snap.bytes, 16 * kKiB);
  EXPECT_EQ(snap.latency.count(), 2u);
  EXPECT_GT(snap.latency.Percentile(50), 0u);
}

// Each device has its own share of a lane: a device that holds its requests
// (slow, or failing) fills only its share, and the lane's requests for
// another device go past the ones waiting for it.
TEST_F(SchedulerTest, FullDeviceDoesNotHoldUpAnotherDevicesRequestsInTheSameLane) {
  ASSERT_NO_FATAL_FAILURE(OpenImage(8 * kMiB));
  const std::string second = dir_.Join("img2");
  int fd = ::open(second.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fallocate(fd, 0, 0, 8 * kMiB), 0);
  ::close(fd);
  auto dev2 = device::BlockDevice::Open(second, false);
  ASSERT_TRUE(dev2.ok());
  device::IoEngineOptions eo;
  eo.rings = 2;
  eo.staging_pool_bytes = 0;
  auto engine = device::IoEngine::Create({dev_.get(), dev2->get()}, eo);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  GateIo gate(**engine);
  AlignedBuf buf = Aligned(8 * kMiB);
  std::memset(buf.get(), 5, 8 * kMiB);
  Latch latch(6);
  auto done = [&](Status st) {
    EXPECT_TRUE(st.ok()) << st.ToString();
    latch.Arrive();
  };
  {
    Scheduler sched(gate, SmallOptions());  // 4 commands per lane
    OpenAtExit open_gate(gate);
    std::vector<IoRequest> r;
    for (int i = 0; i < 5; ++i) {  // 5 on device 0: the 5th waits for room
      r.push_back(IoRequest{IoOp::kRead, 0, i * 4 * kKiB, buf.get() + i * 4 * kKiB, 4 * kKiB, done});
    }
    r.push_back(IoRequest{IoOp::kRead, 1, kMiB, buf.get() + kMiB, 4 * kKiB, done});
    sched.Submit(Lane::kRead, r);
    auto a = gate.arrivals();
    ASSERT_EQ(a.size(), 5u) << "device 1's request waited behind device 0's";
    EXPECT_EQ(a[4], kMiB);
    auto devs = sched.DeviceSnapshots();
    ASSERT_EQ(devs.size(), 2u);
    EXPECT_EQ(devs[0].inflight_commands, 4u);
    EXPECT_EQ(devs[0].queued, 1u);
    EXPECT_EQ(devs[1].inflight_commands, 1u);
    gate.Open();
    ASSERT_TRUE(latch.Wait());
    devs = sched.DeviceSnapshots();
    EXPECT_EQ(devs[0].ops, 5u);
    EXPECT_EQ(devs[1].ops, 1u);
    EXPECT_EQ(devs[1].bytes, 4 * kKiB);
  }
}

}  // namespace
}  // namespace kvfs::io
