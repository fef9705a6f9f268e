// Evictor: the policy over fake space and eviction hooks. A pass starts at
// the high watermark and stops at the low one; a writer that finds the
// volume full gets space from a pass, or ENOSPC at once when nothing is
// evictable, and never waits past its bound; RunPass goes where told.
#include "fs/eviction.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

namespace kvfs::fs {
namespace {

constexpr uint64_t kTotal = 1000;

// The Evictor's clock in tests: it moves only when the test says.
struct FakeClock {
  std::atomic<int64_t> ns{0};
  std::chrono::steady_clock::time_point Now() const {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns.load()));
  }
  void Advance(std::chrono::nanoseconds d) { ns += d.count(); }
};

// A volume of kTotal bytes holding files of 10 bytes; `evictable` of them
// may go. Committing frees what was evicted.
struct FakeVolume {
  std::mutex mu;
  uint64_t used = 0;
  uint64_t evictable = 0;
  uint64_t evicted_uncommitted = 0;
  std::vector<Evictor::Gone> told;

  Evictor::Hooks Hooks(const FakeClock* clock = nullptr) {
    Evictor::Hooks h;
    if (clock) h.now = [clock] { return clock->Now(); };
    h.space = [this] {
      std::lock_guard<std::mutex> l(mu);
      return Evictor::Space{used, kTotal};
    };
    h.evict = [this](size_t max_files, uint64_t bytes, std::vector<Evictor::Gone>* gone) {
      std::lock_guard<std::mutex> l(mu);
      Evictor::Batch b;
      while (b.files < max_files && b.bytes < bytes && evictable > 0) {
        --evictable;
        ++b.files;
        b.bytes += 10;
        evicted_uncommitted += 10;
        gone->push_back({1, "f", b.files});
      }
      return b;
    };
    h.commit = [this] {
      std::lock_guard<std::mutex> l(mu);
      used -= evicted_uncommitted;
      evicted_uncommitted = 0;
    };
    h.evicted = [this](const Evictor::Gone& g) {
      std::lock_guard<std::mutex> l(mu);
      told.push_back(g);
    };
    return h;
  }
  uint64_t Used() {
    std::lock_guard<std::mutex> l(mu);
    return used;
  }
  void Fill(uint64_t bytes, uint64_t files_evictable) {
    std::lock_guard<std::mutex> l(mu);
    used = bytes;
    evictable = files_evictable;
  }
};

EvictionOptions Options() {
  EvictionOptions o;
  o.enabled = true;
  o.high_pct = 90;
  o.low_pct = 80;
  o.writer_wait = std::chrono::milliseconds(300);
  return o;
}

void WaitFor(const std::function<bool()>& cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!cond()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(EvictorTest, PassRunsFromHighToLowWatermark) {
  FakeVolume v;
  Evictor e(Options(), v.Hooks());
  v.Fill(890, 89);
  e.Allocated();  // below the high mark: nothing happens
  e.WaitIdle();    // the pass thread looked since, and found nothing to do
  EXPECT_EQ(v.Used(), 890u);
  EXPECT_EQ(e.counters().passes, 0u);
  v.Fill(950, 95);
  e.Allocated();
  WaitFor([&] { return v.Used() <= 800; });
  EXPECT_EQ(v.Used(), 800u);  // not past the low mark
  const EvictionCounters c = e.counters();
  EXPECT_EQ(c.files, 15u);
  EXPECT_EQ(c.bytes, 150u);
  EXPECT_GE(c.passes, 1u);
  e.WaitIdle();
  EXPECT_EQ(v.Used(), 800u);  // nothing more once idle
  EXPECT_EQ(e.counters().passes_done, e.counters().passes);
  WaitFor([&] {
    std::lock_guard<std::mutex> l(v.mu);
    return v.told.size() == 15;
  });
}

TEST(EvictorTest, WriterGetsSpaceFromAPass) {
  FakeVolume v;
  EvictionOptions o = Options();
  o.high_pct = 100;  // no background pass: the writer's own
  Evictor e(o, v.Hooks());
  v.Fill(1000, 100);
  int tries = 0;
  Status st = e.ReserveWaiting(
      [&] {
        ++tries;
        return v.Used() <= 1000 - 40 ? Status::OK() : Status::Error(ENOSPC, "full");
      },
      40);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(tries, 1);
  EXPECT_EQ(v.Used(), 960u);  // only what the write needs: the pass does the rest
  EXPECT_EQ(e.counters().writer_waits, 1u);
}

TEST(EvictorTest, NothingEvictableIsEnospcAtOnce) {
  FakeVolume v;
  FakeClock clock;
  Evictor e(Options(), v.Hooks(&clock));
  v.Fill(1000, 0);
  // Each try takes 1 ms of the writer's 300: a writer that waited for
  // space would try again and again.
  int tries = 0;
  Status st = e.ReserveWaiting(
      [&] {
        ++tries;
        clock.Advance(std::chrono::milliseconds(1));
        return Status::Error(ENOSPC, "full");
      },
      40);
  EXPECT_EQ(st.code(), ENOSPC);
  EXPECT_EQ(tries, 1);
  EXPECT_EQ(e.counters().writer_wait_ns, 1'000'000u);
}

TEST(EvictorTest, WriterWaitIsBounded) {
  FakeVolume v;
  FakeClock clock;
  Evictor e(Options(), v.Hooks(&clock));
  v.Fill(1000, 1u << 30);  // eviction frees space, but the write never fits
  // Each try takes 100 ms of the writer's 300 (Options()); an unbounded
  // wait would go on until the 1000th, which fits.
  int tries = 0;
  Status st = e.ReserveWaiting(
      [&] {
        clock.Advance(std::chrono::milliseconds(100));
        return ++tries < 1000 ? Status::Error(ENOSPC, "full") : Status::OK();
      },
      40);
  EXPECT_EQ(st.code(), ENOSPC);
  EXPECT_GE(tries, 1);
  EXPECT_LE(tries, 3);
  EXPECT_EQ(e.counters().writer_wait_ns, static_cast<uint64_t>(tries) * 100'000'000u);
}

TEST(EvictorTest, RunPassGoesWhereTold) {
  FakeVolume v;
  EvictionOptions o = Options();
  o.high_pct = 100;
  Evictor e(o, v.Hooks());
  v.Fill(700, 70);
  EXPECT_EQ(e.RunPass(50), 20u);
  EXPECT_EQ(v.Used(), 500u);
  EXPECT_EQ(e.RunPass(60), 0u);  // already below
}

}  // namespace
}  // namespace kvfs::fs
