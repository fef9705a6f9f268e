#include "io/read_priority.h"

#include <algorithm>
#include <thread>

namespace kvfs::io {

namespace {

// How often a write waiting on a read in flight looks again.
constexpr uint64_t kInflightPollNs = 200'000;

uint64_t SteadyNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

ReadPriority::ReadPriority() : ReadPriority(Options{}) {}

ReadPriority::ReadPriority(Options options) : options_([&] {
  if (!options.now_ns) options.now_ns = SteadyNs;
  if (!options.sleep) options.sleep = [](std::chrono::nanoseconds d) { std::this_thread::sleep_for(d); };
  return std::move(options);
}()) {}

void ReadPriority::ReadStarted(pid_t reader) {
  last_reader_.store(reader, std::memory_order_relaxed);
  reads_inflight_.fetch_add(1, std::memory_order_relaxed);
  last_read_ns_.store(options_.now_ns(), std::memory_order_relaxed);
}

void ReadPriority::ReadDone() {
  last_read_ns_.store(options_.now_ns(), std::memory_order_relaxed);
  reads_inflight_.fetch_sub(1, std::memory_order_relaxed);
}

bool ReadPriority::Yields(pid_t writer, uint64_t now) const {
  const uint64_t last = last_read_ns_.load(std::memory_order_relaxed);
  if (last == 0 || last_reader_.load(std::memory_order_relaxed) == writer) return false;
  if (reads_inflight_.load(std::memory_order_relaxed) > 0) return true;
  const uint64_t quiet = std::chrono::nanoseconds(options_.quiet).count();
  return now < last + quiet;
}

bool ReadPriority::WriteWouldWait(pid_t writer) const {
  return Yields(writer, options_.now_ns());
}

std::chrono::nanoseconds ReadPriority::BeforeWrite(pid_t writer) {
  const uint64_t start = options_.now_ns();
  const uint64_t deadline = start + std::chrono::nanoseconds(options_.max_wait).count();
  const uint64_t quiet = std::chrono::nanoseconds(options_.quiet).count();
  uint64_t now = start;
  while (now < deadline && Yields(writer, now)) {
    // Until the reads would have paused, were there no new one meanwhile
    // (and no read in flight: then a short nap, as a read's end is not
    // signalled).
    uint64_t until = std::min(deadline, last_read_ns_.load(std::memory_order_relaxed) + quiet);
    if (until <= now) until = std::min(deadline, now + kInflightPollNs);
    options_.sleep(std::chrono::nanoseconds(until - now));
    now = options_.now_ns();
  }
  if (now == start) return std::chrono::nanoseconds(0);
  waits_.fetch_add(1, std::memory_order_relaxed);
  waited_ns_.fetch_add(now - start, std::memory_order_relaxed);
  return std::chrono::nanoseconds(now - start);
}

}  // namespace kvfs::io
