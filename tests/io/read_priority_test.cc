// ReadPriority on a clock the test steps: a sleep advances it, and a hook
// lets a test change what the reads do while a write waits.
#include "io/read_priority.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>

namespace kvfs::io {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

constexpr pid_t kReader = 100;
constexpr pid_t kWriter = 200;

class SteppedClock {
 public:
  uint64_t now = 1'000'000'000;  // ns
  std::function<void()> on_sleep;

  ReadPriority::Options Options() {
    ReadPriority::Options o;
    o.quiet = microseconds(2000);
    o.max_wait = microseconds(20000);
    o.now_ns = [this] { return now; };
    o.sleep = [this](nanoseconds d) {
      now += static_cast<uint64_t>(d.count());
      if (on_sleep) on_sleep();
    };
    return o;
  }
  void Advance(microseconds d) { now += static_cast<uint64_t>(nanoseconds(d).count()); }
};

TEST(ReadPriorityTest, WritesGoAtOnceWhenNobodyReads) {
  SteppedClock clock;
  ReadPriority rp(clock.Options());
  EXPECT_FALSE(rp.WriteWouldWait(kWriter));
  EXPECT_EQ(rp.BeforeWrite(kWriter), nanoseconds(0));
  EXPECT_EQ(rp.waits(), 0u);
}

TEST(ReadPriorityTest, AnotherCallersWriteWaitsUntilTheReadsPause) {
  SteppedClock clock;
  ReadPriority rp(clock.Options());
  rp.ReadStarted(kReader);
  clock.Advance(microseconds(100));
  rp.ReadDone();
  clock.Advance(microseconds(300));
  EXPECT_TRUE(rp.WriteWouldWait(kWriter));
  // The reads have paused once 2 ms passed since the last one ended.
  EXPECT_EQ(rp.BeforeWrite(kWriter), microseconds(1700));
  EXPECT_FALSE(rp.WriteWouldWait(kWriter));
  EXPECT_EQ(rp.waits(), 1u);
  EXPECT_EQ(rp.waited_ns(), 1'700'000u);
  EXPECT_EQ(rp.BeforeWrite(kWriter), nanoseconds(0));  // quiet now
  EXPECT_EQ(rp.waits(), 1u);
}

TEST(ReadPriorityTest, ACallersOwnReadsNeverHoldUpItsWrites) {
  SteppedClock clock;
  ReadPriority rp(clock.Options());
  rp.ReadStarted(kWriter);
  EXPECT_FALSE(rp.WriteWouldWait(kWriter));
  EXPECT_EQ(rp.BeforeWrite(kWriter), nanoseconds(0));
  EXPECT_TRUE(rp.WriteWouldWait(kReader));  // but another caller's do
}

TEST(ReadPriorityTest, AReadInFlightHoldsWritesUntilItEndsAndTheQuietPasses) {
  SteppedClock clock;
  ReadPriority rp(clock.Options());
  rp.ReadStarted(kReader);
  clock.Advance(microseconds(5000));  // waiting for the device, long past `quiet`
  EXPECT_TRUE(rp.WriteWouldWait(kWriter));
  const uint64_t start = clock.now;
  clock.on_sleep = [&] {
    if (clock.now - start >= 3'000'000) {
      clock.on_sleep = nullptr;
      rp.ReadDone();
    }
  };
  const nanoseconds waited = rp.BeforeWrite(kWriter);
  // Ended at 3 ms (give or take one poll), then 2 ms of quiet.
  EXPECT_GE(waited, microseconds(5000));
  EXPECT_LE(waited, microseconds(5200));
}

TEST(ReadPriorityTest, ReadsThatNeverPauseHoldAWriteForMaxWaitOnly) {
  SteppedClock clock;
  ReadPriority rp(clock.Options());
  // A read starts every 500 us for as long as the write waits.
  uint64_t next = clock.now;
  clock.on_sleep = [&] {
    while (next <= clock.now) {
      rp.ReadStarted(kReader);
      rp.ReadDone();
      next += 500'000;
    }
  };
  clock.on_sleep();
  EXPECT_EQ(rp.BeforeWrite(kWriter), microseconds(20000));
  EXPECT_EQ(rp.waits(), 1u);
  // A read stuck in flight: the same bound.
  rp.ReadStarted(kReader);
  clock.on_sleep = nullptr;
  EXPECT_EQ(rp.BeforeWrite(kWriter), microseconds(20000));
  EXPECT_EQ(rp.waits(), 2u);
}

TEST(ReadPriorityTest, ReadingEndsAtEndOrDestructionOnce) {
  SteppedClock clock;
  ReadPriority rp(clock.Options());
  {
    ReadPriority::Reading r(rp, kReader);
    clock.Advance(microseconds(10000));
    EXPECT_TRUE(rp.WriteWouldWait(kWriter));  // in flight
    r.End();
    r.End();  // a second End does not end another read
    EXPECT_TRUE(rp.WriteWouldWait(kWriter));  // just ended: not quiet yet
    clock.Advance(microseconds(2000));
    EXPECT_FALSE(rp.WriteWouldWait(kWriter));
  }  // and the destructor does not end it again
  {
    ReadPriority::Reading a(rp, kReader);
    {
      ReadPriority::Reading b(rp, kReader);
    }  // b ends unanswered (its callback dropped); a is still in flight
    clock.Advance(microseconds(10000));
    EXPECT_TRUE(rp.WriteWouldWait(kWriter));
  }
  clock.Advance(microseconds(2000));
  EXPECT_FALSE(rp.WriteWouldWait(kWriter));
}

}  // namespace
}  // namespace kvfs::io
