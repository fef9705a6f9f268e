#include "fuse/read_priority.h"

#include <algorithm>

#include "io/clock.h"

namespace kvfs::fuse {

ReadPriority::ReadPriority() : ReadPriority(Options{}) {}

ReadPriority::ReadPriority(Options options) : options_([&] {
  if (!options.now_ns) options.now_ns = io::SteadyNowNs;
  return std::move(options);
}()) {}

void ReadPriority::ReadStarted(pid_t reader) {
  last_reader_.store(reader, std::memory_order_relaxed);
  reads_inflight_.fetch_add(1);
  last_read_ns_.store(options_.now_ns(), std::memory_order_relaxed);
}

void ReadPriority::ReadDone() {
  last_read_ns_.store(options_.now_ns(), std::memory_order_relaxed);
  if (reads_inflight_.fetch_sub(1) == 1 && sleepers_.load() > 0) {
    // Under the lock, so that a write between its check and its wait
    // cannot miss this.
    MutexLock l(mu_);
    reads_ended_.NotifyAll();
  }
}

bool ReadPriority::Yields(pid_t writer, uint64_t now) const {
  const uint64_t last = last_read_ns_.load(std::memory_order_relaxed);
  if (last == 0 || last_reader_.load(std::memory_order_relaxed) == writer) return false;
  if (reads_inflight_.load() > 0) return true;
  const uint64_t quiet = std::chrono::nanoseconds(options_.quiet).count();
  return now < last + quiet;
}

bool ReadPriority::WriteWouldWait(pid_t writer) const {
  return options_.max_waiting > 0 && sleepers_.load(std::memory_order_relaxed) < options_.max_waiting &&
         Yields(writer, options_.now_ns());
}

void ReadPriority::Sleep(std::chrono::nanoseconds d) {
  if (options_.sleep) return options_.sleep(d);
  MutexLock l(mu_);
  if (reads_inflight_.load() == 0) {
    // No read in flight: only a new one could change the answer, and
    // nothing signals those; the quiet window ends on its own.
    reads_ended_.WaitFor(l, d);
  } else {
    const auto deadline = std::chrono::steady_clock::now() + d;
    while (reads_inflight_.load() != 0 && reads_ended_.WaitUntil(l, deadline)) {
    }
  }
}

std::chrono::nanoseconds ReadPriority::BeforeWrite(pid_t writer) {
  if (sleepers_.fetch_add(1) >= options_.max_waiting) {
    sleepers_.fetch_sub(1);
    return std::chrono::nanoseconds(0);
  }
  const uint64_t start = options_.now_ns();
  const uint64_t deadline = start + std::chrono::nanoseconds(options_.max_wait).count();
  const uint64_t quiet = std::chrono::nanoseconds(options_.quiet).count();
  uint64_t now = start;
  while (now < deadline && Yields(writer, now)) {
    // Until the reads would have paused, were there no new one meanwhile;
    // with a read in flight, until it ends (or the deadline).
    uint64_t until = deadline;
    if (reads_inflight_.load() == 0) {
      until = std::min(deadline, last_read_ns_.load(std::memory_order_relaxed) + quiet);
    }
    Sleep(std::chrono::nanoseconds(until > now ? until - now : 1));
    now = options_.now_ns();
  }
  sleepers_.fetch_sub(1);
  if (now == start) return std::chrono::nanoseconds(0);
  waits_.fetch_add(1, std::memory_order_relaxed);
  waited_ns_.fetch_add(now - start, std::memory_order_relaxed);
  return std::chrono::nanoseconds(now - start);
}

}  // namespace kvfs::fuse
