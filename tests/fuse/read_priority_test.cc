// ReadPriority on a clock the test steps: a sleep advances it (cut short
// where the test ends the read in flight, as the daemon's wait is), and a
// hook lets a test change what the reads do while a write waits.
#include "fuse/read_priority.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

namespace kvfs::fuse {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

constexpr pid_t kReader = 100;
constexpr pid_t kWriter = 200;

class SteppedClock {
 public:
  uint64_t now = 1'000'000'000;  // ns
  std::function<void()> on_sleep;
  // The read in flight ends then (ns), through `end_read`.
  uint64_t read_ends_at = 0;
  std::function<void()> end_read;

  ReadPriority::Options Options(unsigned max_waiting = 16) {
    ReadPriority::Options o;
    o.quiet = microseconds(2000);
    o.max_wait = microseconds(20000);
    o.max_waiting = max_waiting;
    o.now_ns = [this] { return now; };
    o.sleep = [this](nanoseconds d) {
      const uint64_t until = now + static_cast<uint64_t>(d.count());
      if (read_ends_at != 0 && read_ends_at <= until) {
        now = read_ends_at;
        read_ends_at = 0;
        end_read();
      } else {
        now = until;
      }
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
  clock.read_ends_at = clock.now + 3'000'000;
  clock.end_read = [&] { rp.ReadDone(); };
  // It ends 3 ms into the wait; then 2 ms of quiet.
  EXPECT_EQ(rp.BeforeWrite(kWriter), microseconds(5000));
}

TEST(ReadPriorityTest, OnlyMaxWaitingWritesWaitAtOnce) {
  SteppedClock clock;
  ReadPriority rp(clock.Options(/*max_waiting=*/1));
  rp.ReadStarted(kReader);
  bool checked = false;
  clock.on_sleep = [&] {
    if (checked) return;
    checked = true;
    // Another writer, while the first one waits: it would hold another
    // thread the reads may need, so it goes at once.
    EXPECT_FALSE(rp.WriteWouldWait(kWriter + 1));
    EXPECT_EQ(rp.BeforeWrite(kWriter + 1), nanoseconds(0));
  };
  EXPECT_EQ(rp.BeforeWrite(kWriter), microseconds(20000));
  EXPECT_TRUE(checked);
  EXPECT_EQ(rp.waits(), 1u);
  EXPECT_TRUE(rp.WriteWouldWait(kWriter));  // nobody waits now

  ReadPriority off(clock.Options(/*max_waiting=*/0));
  off.ReadStarted(kReader);
  EXPECT_FALSE(off.WriteWouldWait(kWriter));
  EXPECT_EQ(off.BeforeWrite(kWriter), nanoseconds(0));
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

TEST(ReadPriorityTest, TheEndOfTheLastReadInFlightWakesAWaitingWrite) {
  // The real clock and wait: a write waits for a read on the device and is
  // woken when it ends, not at max_wait.
  ReadPriority::Options o;
  o.quiet = microseconds(1000);
  o.max_wait = std::chrono::seconds(10);
  ReadPriority rp(o);
  rp.ReadStarted(kReader);
  const auto start = std::chrono::steady_clock::now();
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    rp.ReadDone();
  });
  const nanoseconds waited = rp.BeforeWrite(kWriter);
  reader.join();
  EXPECT_GE(waited, std::chrono::milliseconds(5));
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(rp.waits(), 1u);
}

}  // namespace
}  // namespace kvfs::fuse
