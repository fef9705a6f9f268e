// Per-opcode counts of the FUSE requests the daemon received: what a
// connector's call sequence costs in round trips (docs/budget.md), shown in
// MOUNT/.kvfs/stats ("requests"), MOUNT/.kvfs/metrics
// (kvfs_fuse_requests_total) and `kvfsctl stats`; and per-opcode times of
// each request inside the daemon ("request_times",
// kvfs_fuse_request_seconds):
//   handled  from the moment the transport took the request from the
//            kernel to the return of its handler on the thread that ran it
//            (the reply is written by then, but for a READ answered from
//            its device completion);
//   handoff  for a request handed to a worker, from that moment to the
//            start of its run there (the queue and the worker's wake-up).
// What a request costs around these (the kernel's copies, the caller's and
// the queue thread's sleeps and wake-ups) is the transport's: docs/budget.md.
//
// Every transport calls CountRequest() once per request it takes from the
// kernel, before the request is dispatched (the /dev/fuse loop in
// request_loop.cc; the io_uring queues likewise):
//
//   kvfs::fuse::CountRequest(*static_cast<const fuse_in_header*>(buf.mem));
//
// The counts are the process's: a daemon serves one mount.
//
// Thread safety: CountRequest and RequestCounts may be called from any
// thread at once. CountRequest is one relaxed atomic add into an array
// indexed by opcode (no lock, no branch on the hot opcodes).
#pragma once

#include <linux/fuse.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/histogram.h"

namespace kvfs::fuse {

namespace op_counters_internal {
// Opcodes 0..kSlots-2 have a slot each (FUSE's run to 52); anything else
// (CUSE_INIT, a newer kernel's opcode) counts in the last slot, "other".
inline constexpr uint32_t kSlots = 64;
extern std::atomic<uint64_t> g_counts[kSlots];
}  // namespace op_counters_internal

// Counts one request of `in.opcode`.
inline void CountRequest(const fuse_in_header& in) {
  using namespace op_counters_internal;
  const uint32_t slot = in.opcode < kSlots - 1 ? in.opcode : kSlots - 1;
  g_counts[slot].fetch_add(1, std::memory_order_relaxed);
}

// A request timestamp for TimeHandled/TimeHandoff (CLOCK_MONOTONIC, ns).
uint64_t RequestClockNs();
// Records a request of `opcode` handled `ns` after it was taken from the
// kernel, or handed off (started on a worker) `ns` after.
void TimeHandled(uint32_t opcode, uint64_t ns);
void TimeHandoff(uint32_t opcode, uint64_t ns);

// The opcode's name as the stats show it ("lookup", "rename2", ...), or
// "other" for one without a slot or a name.
const char* RequestName(uint32_t opcode);

// (name, count) of every opcode counted at least once, in opcode order
// ("other" last). Counts only grow; each is read on its own (a snapshot
// taken while requests arrive is not one instant).
std::vector<std::pair<std::string, uint64_t>> RequestCounts();

struct RequestTimes {
  std::string name;  // RequestName()
  HistogramSnapshot handled;
  HistogramSnapshot handoff;  // empty when none was handed off
};
// The times of every opcode timed at least once, in opcode order. A
// request's handled time is recorded once its handler returned, after its
// reply: a snapshot may miss the requests just answered.
std::vector<RequestTimes> RequestTimings();

}  // namespace kvfs::fuse
