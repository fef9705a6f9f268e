// ReadPriority: foreground reads go before other callers' writes at the
// request level, above the lanes.
//
// The lanes order the device's work; they cannot order the CPU. On a small
// machine a store burst's writes cost the CPU its copies (the writer's into
// the kernel, the daemon's into staging), and a reader waiting for its
// replies then gets half the machine even when its data is already in RAM:
// a 64 x 4 MiB restore under a 4 GiB burst took 2.1-2.5x its idle time with
// the device idle half of it. So while some caller is reading, a write from
// another caller waits for the reads to pause, for at most `max_wait` per
// write request. A caller's own reads never hold up its writes (a copy
// within the mount, or a loop that loads one key and stores the next, is
// not slowed).
//
// Callers are told apart by the id the kernel gives with each request (the
// thread's; 0 for callers outside the daemon's pid namespace, which then
// never wait). Only the last reader is remembered: while two threads read,
// a third thread's writes wait, and each reader's writes wait whenever the
// other read last.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>

#include "common/mutex.h"

namespace kvfs::fuse {

class ReadPriority {
 public:
  struct Options {
    // Reads this far apart (the end of one to the start of the next) still
    // count as one stretch of reading.
    std::chrono::microseconds quiet{2000};
    // The longest one write request waits. While reads never pause, each
    // writing thread still gets one request through per max_wait (1 MiB
    // per 20 ms: 50 MB/s).
    std::chrono::microseconds max_wait{20000};
    // Writes that may be waiting at once; beyond, writes go at once. Each
    // holds a thread the reads may need (0: writes never wait).
    unsigned max_waiting = 16;
    // Tests step a clock of their own: `now_ns` and a `sleep` that advances
    // it. By default: the steady clock, and a sleep that the end of the
    // last read in flight cuts short.
    std::function<uint64_t()> now_ns;
    std::function<void(std::chrono::nanoseconds)> sleep;
  };

  ReadPriority();
  explicit ReadPriority(Options options);

  // A foreground read by `reader` starts now; ReadDone when it has its
  // reply. A read waiting for the device counts as reading throughout.
  void ReadStarted(pid_t reader);
  void ReadDone();

  // ReadStarted now and ReadDone at End() or destruction, whichever is
  // first: for a read whose reply comes from a callback.
  class Reading {
   public:
    Reading(ReadPriority& p, pid_t reader) : p_(p) { p_.ReadStarted(reader); }
    ~Reading() { End(); }
    Reading(const Reading&) = delete;
    Reading& operator=(const Reading&) = delete;
    void End() {
      if (!ended_.exchange(true, std::memory_order_relaxed)) p_.ReadDone();
    }

   private:
    ReadPriority& p_;
    std::atomic<bool> ended_{false};
  };

  // True if a write by `writer` would wait now.
  bool WriteWouldWait(pid_t writer) const;
  // Waits while another caller is reading (see above); returns how long.
  std::chrono::nanoseconds BeforeWrite(pid_t writer);

  // Writes that waited, and their total wait.
  uint64_t waits() const { return waits_.load(std::memory_order_relaxed); }
  uint64_t waited_ns() const { return waited_ns_.load(std::memory_order_relaxed); }

 private:
  // The read is recent, by another caller. `now` in the clock's ns.
  bool Yields(pid_t writer, uint64_t now) const;
  // Sleeps `d`, or less if the reads in flight all end meanwhile.
  void Sleep(std::chrono::nanoseconds d);

  const Options options_;
  // Written together without a lock: a write that races a read may decide
  // on the reader before last, which costs at most one wait or one write
  // let through.
  std::atomic<uint64_t> last_read_ns_{0};  // the last start or end of a read
  std::atomic<pid_t> last_reader_{0};
  // Sequentially consistent, with sleepers_: a write that goes to sleep
  // while the last read in flight ends is woken.
  std::atomic<uint32_t> reads_inflight_{0};
  std::atomic<uint32_t> sleepers_{0};  // writes in BeforeWrite
  Mutex mu_;
  CondVar reads_ended_;
  std::atomic<uint64_t> waits_{0};
  std::atomic<uint64_t> waited_ns_{0};
};

}  // namespace kvfs::fuse
