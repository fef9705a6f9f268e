// Scheduler: lanes over a BlockIo, so that a foreground read never waits
// behind write-behind or prefetch.
//
// Every request goes to one Lane (lane.h). Each lane has its own FIFO queue
// and its own bounds on what it keeps in flight at the device: device
// commands and bytes (LaneLimit). On top of that the scheduler never keeps
// more than `device_commands` commands in flight in total: the capacity of
// the BlockIo below before it starts queueing (IoEngine: rings *
// queue_depth). The engine's own queues are FIFO and cannot tell a read from
// a write, so the scheduler keeps them empty and does the queueing itself.
//
// Bounds are kept per device: each device has its own share of every lane
// (the lane's LaneLimit applies to that lane's requests for that device) and
// its own `device_commands`, so a slow or failing device fills only its own
// bounds and the other devices' requests go past it.
//
// A request is dispatched (handed to the BlockIo) when
//   - no earlier request of its lane for the same device is still queued,
//   - its lane is under both of its bounds for that device with the request
//     added, or the lane has nothing in flight there (so a request larger
//     than a bound still goes, alone, and nothing starves),
//   - its device has room for it: in-flight commands plus its own stay
//     within `device_commands`, or nothing is in flight there at all,
//   - and no queue of a higher-priority lane has a request for that device
//     waiting for device room (strict priority for each device's capacity).
// Lanes are visited in priority order read > meta > delete > write >
// prefetch whenever a request is submitted or one completes.
//
// While anything is queued or in flight on the read or prefetch lane,
// write-behind may start only a quarter of its commands
// (kWriteDivisorWhileReading). Why: the device shares its throughput, and
// during a burst of stores a restore (64 x 4 MiB, loaded by lookups and
// prefetch) took 2.3-2.6x its idle time with 16 write commands in flight
// and 1.6-2.2x with 4 (kvfs-bench's restore, one mount at a time,
// alternating); the stores' write-out slows meanwhile (staging absorbs it).
//
// Why reads are never behind writes: SchedulerOptions::Validate() requires
// limits[write].max_commands + limits[prefetch].max_commands <
// device_commands. Write-behind and prefetch together therefore never fill
// the device, a read finds a free command slot as soon as it is submitted,
// and it is never queued inside the engine behind them. What the device
// itself has in flight for the write lane (its max_bytes) is all a read can
// wait behind. (IoEngine spreads commands over its rings round-robin, so a
// ring can still queue briefly when the rings are unevenly loaded.)
//
// Cost of a request: ceil(len / command_bytes) device commands (at least 1;
// a kFlush is 1 command and 0 bytes), matching how IoEngine splits requests
// into commands of max_command_bytes.
//
// Promotion: a reader that finds the data it needs in a prefetch still
// queued calls Promote() with the request's `group` (the cache entry), and
// those requests move to the tail of the read lane. Why: lookups queue
// prefetches for whole batches of files at once, and a serial reader
// waiting for the next key's chunk must not wait behind the rest of the
// batch.
//
// Cancellation: Submit() takes an optional CancelFlag shared by the requests
// of the call. A request whose flag is true when it would be dispatched is
// completed with ECANCELED and never reaches the device; Cancel() sets a
// flag and at once completes every queued request carrying it. A request
// already dispatched runs to its end whatever the flag says.
//
// Queues are unbounded: Submit() never blocks, so callers bound what they
// queue (the fs bounds staged data and read-ahead).
//
//   Scheduler sched(volume.io(), SchedulerOptions::ForEngine(engine.options()));
//   IoRequest r{.op = IoOp::kRead, .device = 0, .byte_off = off, .buf = buf,
//               .len = len, .done = [](Status st) { /* on an engine thread */ }};
//   sched.Submit(Lane::kRead, std::span(&r, 1), cancel_flag);
//
// Thread safety: every method may be called from any thread, including from
// a `done` callback (Submit(), Promote() and Cancel(); not the *Sync
// helpers). The
// destructor must not run inside a `done`, and once it has started only
// `done` callbacks may still call Submit().
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/histogram.h"
#include "common/mutex.h"
#include "common/status.h"
#include "device/block_io.h"
#include "device/io_engine.h"
#include "io/lane.h"

namespace kvfs::io {

// The write lane's command bound is divided by this while reads are busy
// (see the top).
inline constexpr uint32_t kWriteDivisorWhileReading = 4;

// In-flight bounds of one lane.
struct LaneLimit {
  uint32_t max_commands = 1;  // device commands (see "Cost of a request")
  uint64_t max_bytes = 1;     // bytes of read/write requests
};

// The default lane limits for a device that takes `device_commands`
// commands (>= 3) in flight; see SchedulerOptions.
std::array<LaneLimit, kLaneCount> DefaultLaneLimits(uint32_t device_commands);

struct SchedulerOptions {
  // Commands the BlockIo below keeps in flight before it queues them itself;
  // IoEngine: rings * queue_depth. 128 is the default engine (queue_depth 64)
  // with 2 rings, its fewest.
  uint32_t device_commands = 128;
  // Bytes per device command; IoEngine: max_command_bytes. Used only to
  // count what a request costs.
  uint64_t command_bytes = 1 << 20;
  // Indexed by LaneIndex(lane).
  std::array<LaneLimit, kLaneCount> limits = DefaultLaneLimits(128);

  // The defaults for an engine with `engine` options, as IoEngine::options()
  // reports them (rings resolved; rings == 0 is taken as 2, the fewest the
  // engine resolves it to, so the capacity is never overstated).
  static SchedulerOptions ForEngine(const device::IoEngineOptions& engine);

  // OK, or EINVAL naming the first broken rule: device_commands >= 1;
  // command_bytes a non-zero multiple of kBlockSize; every lane's
  // max_commands and max_bytes >= 1; and write + prefetch max_commands <
  // device_commands (the rule that keeps room for reads, see the top).
  Status Validate() const;
};

// Shared by the requests of one Submit() (one FUSE request, say); set it to
// true to drop those that have not been dispatched yet.
using CancelFlag = std::shared_ptr<std::atomic<bool>>;

// Counters of one lane. ops/bytes/errors/cancelled and the histograms count
// from construction; the rest is the state at the time of Snapshot().
// Counters of one device, over every lane: ops/bytes/errors/latency count
// from construction, inflight_* are the state at the time of the snapshot.
struct DeviceSnapshot {
  uint64_t ops = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;
  uint64_t inflight_commands = 0;
  uint64_t inflight_bytes = 0;
  uint64_t queued = 0;           // requests waiting for this device, all lanes
  HistogramSnapshot latency;     // Submit() to completion, ns
};

struct LaneSnapshot {
  uint64_t ops = 0;        // requests that reached the device and completed
  uint64_t bytes = 0;      // bytes of those that completed OK
  uint64_t errors = 0;     // of `ops`, those that completed with an error
  uint64_t cancelled = 0;  // completed with ECANCELED, never dispatched
  uint64_t promoted = 0;   // moved from this lane's queue to the read lane
  uint32_t inflight = 0;   // requests at the device now
  uint64_t inflight_commands = 0;
  uint64_t inflight_bytes = 0;
  uint32_t queued = 0;  // requests waiting in the lane's queue now
  uint64_t queued_bytes = 0;
  HistogramSnapshot latency;     // of `ops`: Submit() to completion, ns
  HistogramSnapshot queue_wait;  // of `ops`: Submit() to dispatch, ns
};

class Scheduler {
 public:
  // `io` must outlive the scheduler. REQUIRES: options.Validate().ok();
  // aborts with the reason otherwise (validate mount options where they are
  // parsed).
  Scheduler(device::BlockIo& io, const SchedulerOptions& options);
  // Waits until every request submitted so far has completed and its `done`
  // has returned, queued ones included (they are dispatched as room frees).
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues every request of `reqs` (moved from) at the tail of `lane`'s
  // queue, in span order, and dispatches what the rules at the top allow.
  // Never blocks on I/O or on room. Each request's `done` runs exactly once,
  // never inside Submit(): with the BlockIo's status on one of its threads
  // once the request was dispatched; with ECANCELED if `cancel` was set
  // before dispatch; with EINVAL for a `lane` that is not a Lane. Those two
  // run on an engine thread or the scheduler's own thread. The BlockIo's
  // contract (block_io.h) holds for buffers and for `done`: it must not
  // block on I/O and may call Submit().
  void Submit(Lane lane, std::span<device::IoRequest> reqs, CancelFlag cancel = nullptr);

  // Moves every request queued in the prefetch lane whose IoRequest::group
  // is `group` to the tail of the read lane's queue, in order, and
  // dispatches what the rules allow. Returns how many moved; requests
  // already dispatched stay where they are. A null group is ignored.
  size_t Promote(const void* group);

  // Sets `*flag` and completes, with ECANCELED on the scheduler's thread,
  // every queued request whose CancelFlag is `flag`; dispatched ones are not
  // affected. A null flag is ignored.
  void Cancel(const CancelFlag& flag);

  // Blocking helpers on `lane` for tools and tests; they return what `done`
  // would have received. Never call them from a `done` callback.
  Status ReadSync(Lane lane, uint32_t device, uint64_t byte_off, void* buf, size_t len);
  Status WriteSync(Lane lane, uint32_t device, uint64_t byte_off, const void* buf, size_t len);
  Status FlushSync(Lane lane, uint32_t device);

  uint32_t device_count() const { return io_.device_count(); }
  const SchedulerOptions& options() const { return options_; }
  // Bytes of `lane`'s requests queued or at the device now, on every device.
  uint64_t LaneBytes(Lane lane) const;
  // Counters of every lane, indexed by LaneIndex().
  std::array<LaneSnapshot, kLaneCount> Snapshot() const;
  // Counters of every device, indexed by device.
  std::vector<DeviceSnapshot> DeviceSnapshots() const;

  // Implementation details follow.
 private:
  struct Op;
  // What one lane has in flight on one device.
  struct DeviceShare {
    uint32_t queued = 0;  // the lane's requests for the device in its queue
    uint32_t inflight = 0;
    uint64_t commands = 0;
    uint64_t bytes = 0;
  };
  // Reached only through lanes_, so guarded by mu_ with it (the analysis
  // checks lanes_; a nested type cannot name the outer mu_).
  struct LaneState {
    std::deque<Op*> queue;  // FIFO
    uint64_t queued_bytes = 0;
    // Queued requests per non-null group, so that Promote() of a group
    // with nothing queued (its loads are at the device) costs no scan.
    std::unordered_map<const void*, uint32_t> queued_groups;
    uint32_t inflight = 0;
    uint64_t inflight_commands = 0;
    uint64_t inflight_bytes = 0;
    // By device slot (DeviceSlot): the lane's per-device bounds apply here.
    std::vector<DeviceShare> dev;
  };
  struct alignas(64) DeviceStats {
    std::atomic<uint64_t> ops{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> errors{0};
    Histogram latency;
  };
  // Written on every completion: a cache line of its own per lane.
  struct alignas(64) LaneStats {
    std::atomic<uint64_t> ops{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> errors{0};
    std::atomic<uint64_t> cancelled{0};
    std::atomic<uint64_t> promoted{0};
    Histogram latency;
    Histogram queue_wait;
  };

  // Queue bookkeeping of `op` joining or leaving `s.queue` (the caller
  // moves it). The caller holds mu_ (`s` is one of lanes_).
  static void Queued(LaneState& s, const Op* op);
  static void Unqueued(LaneState& s, const Op* op);
  // Moves what may be dispatched now from the queues into `dispatch` (as
  // requests for io_) and cancelled heads into `dropped`.
  void Pump(std::vector<device::IoRequest>* dispatch, std::vector<Op*>* dropped) REQUIRES(mu_);
  // Hands `batch` to io_ and clears it.
  void Dispatch(std::vector<device::IoRequest>* batch) EXCLUDES(mu_);
  // The completion of a dispatched request, on a thread of io_.
  void OnDeviceDone(Op* op, Status st);
  // Completes `op` with `st` without it having reached the device; runs
  // `done` on the calling thread. Not inside Submit() or Cancel().
  void CompleteUndispatched(Op* op, Status st) EXCLUDES(mu_);
  // Queues CompleteUndispatched(op, st) for the scheduler's thread.
  void CompleteLater(Op* op, Status st);
  void CompletionLoop();
  // One request fewer outstanding; wakes the destructor at zero. The last
  // touch of `this` by a completing thread.
  void FinishOne();
  // The accounting slot of a request's device: its index, or one shared
  // slot past the last for indexes the BlockIo will refuse.
  size_t DeviceSlot(uint32_t device) const { return std::min<size_t>(device, slots_ - 1); }

  device::BlockIo& io_;
  const SchedulerOptions options_;

  // The queues and in-flight accounting of every lane: one lock because
  // priority and the device budget are decisions across lanes. Held only
  // for queue and counter updates: never while calling io_.Submit() or a
  // `done`. Lock order: before cq_mu_ (never the reverse); never held with
  // drain_mu_.
  mutable Mutex mu_;
  const size_t slots_;                       // device_count() + 1
  std::array<LaneState, kLaneCount> lanes_ GUARDED_BY(mu_);
  std::vector<uint64_t> device_inflight_ GUARDED_BY(mu_);  // commands, by slot
  std::unique_ptr<DeviceStats[]> device_stats_;  // by slot

  std::array<LaneStats, kLaneCount> stats_;

  // Requests submitted whose `done` has not returned yet. Goes to zero only
  // under drain_mu_ (see FinishOne), so that the destructor cannot free the
  // scheduler under a thread still notifying it.
  std::atomic<uint64_t> outstanding_{0};
  Mutex drain_mu_;
  CondVar drained_cv_;

  // The scheduler's thread: completes requests dropped inside Submit() or
  // Cancel(), where `done` must not run.
  Mutex cq_mu_;
  CondVar cq_cv_;
  std::deque<std::pair<Op*, Status>> cq_ GUARDED_BY(cq_mu_);
  bool cq_stop_ GUARDED_BY(cq_mu_) = false;
  std::thread cq_thread_;                  // last: started once the above exist
};

// A BlockIo that submits everything to one lane of a Scheduler, for code
// written against BlockIo (its *Sync helpers included). `sched` must outlive
// it; thread safety as Scheduler::Submit().
class LaneIo final : public device::BlockIo {
 public:
  LaneIo(Scheduler& sched, Lane lane) : sched_(sched), lane_(lane) {}
  void Submit(std::span<device::IoRequest> reqs) override { sched_.Submit(lane_, reqs); }
  uint32_t device_count() const override { return sched_.device_count(); }

 private:
  Scheduler& sched_;
  Lane lane_;
};

}  // namespace kvfs::io
