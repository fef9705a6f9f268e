#include "io/scheduler.h"

#include <spdlog/spdlog.h>

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/format.h"
#include "io/clock.h"

namespace kvfs::io {

namespace {

const char* OpName(device::IoOp op) {
  switch (op) {
    case device::IoOp::kRead:
      return "read";
    case device::IoOp::kWrite:
      return "write";
    case device::IoOp::kFlush:
      return "flush";
  }
  return "request";
}

std::string Describe(const device::IoRequest& r) {
  std::string s = std::string(OpName(r.op)) + " of device " + std::to_string(r.device);
  if (r.op != device::IoOp::kFlush) {
    s += " [" + std::to_string(r.byte_off) + ", +" + std::to_string(r.len) + ")";
  }
  return s;
}

Status Cancelled(const device::IoRequest& r) {
  return Status::Error(ECANCELED, "io scheduler: " + Describe(r) +
                                      " cancelled before it was dispatched");
}

constexpr uint64_t kMiB = 1 << 20;

// Per-thread scratch for Submit() and completions. Safe to share between
// scheduler instances: each use is emptied before any callback can run on
// the thread (io_.Submit() never runs one inline), so no use nests.
thread_local std::vector<device::IoRequest> tls_dispatch;
// Pump()'s per-device flags, reused so that a pass allocates nothing.
thread_local std::vector<uint8_t> tls_full;
thread_local std::vector<uint8_t> tls_blocked;

}  // namespace

// One request from Submit() until its `done` has returned.
struct Scheduler::Op {
  device::IoRequest req;  // `done` is the caller's
  CancelFlag cancel;
  Lane lane = Lane::kRead;
  uint64_t commands = 1;  // device commands it costs
  uint64_t submit_ns = 0;
  uint64_t dispatch_ns = 0;
};

std::array<LaneLimit, kLaneCount> DefaultLaneLimits(uint32_t device_commands) {
  // Shares of the device's command slots. Write-behind and prefetch
  // together take 3/16, so reads always find 13/16 free. Writes get 1/8: a
  // write burst reaches a device's full rate from about 8 commands in
  // flight (virtio disk, 1 MiB writes) and gains nothing beyond, so 16 of
  // 2 x 64 slots leave a 2x margin for faster devices while reads during
  // the burst keep p90 <= 17 ms. The byte bounds do not bind at 1 MiB
  // commands on 2 rings; they cap how the command shares grow with more
  // rings (8 rings: write 64 commands, but at most 64 MiB in flight), i.e.
  // what a read can find ahead of it.
  const uint32_t c = std::max<uint32_t>(device_commands, 1);
  auto share = [c](uint32_t div) { return std::max<uint32_t>(c / div, 1); };
  std::array<LaneLimit, kLaneCount> l{};
  l[LaneIndex(Lane::kRead)] = {share(2), 256 * kMiB};
  l[LaneIndex(Lane::kMeta)] = {share(16), 16 * kMiB};
  l[LaneIndex(Lane::kDelete)] = {share(16), 16 * kMiB};
  l[LaneIndex(Lane::kWrite)] = {share(8), 64 * kMiB};
  // Prefetch runs shallow: a request's lookups queue all its keys at once,
  // and its loads must land in the order they were asked for (a waited-for
  // one is promoted past the rest), or a serial loop waits for the whole
  // batch before its first key. A deep lane finishes them all together;
  // 1/16 of the slots (8) serves serial 256 KiB loads 1.3-1.4x faster than
  // 32 for at most 10% less with 8 concurrent loops.
  l[LaneIndex(Lane::kPrefetch)] = {share(16), 128 * kMiB};
  return l;
}

SchedulerOptions SchedulerOptions::ForEngine(const device::IoEngineOptions& engine) {
  SchedulerOptions o;
  const uint64_t rings = engine.rings == 0 ? 2 : engine.rings;
  const uint64_t commands = rings * std::max(engine.queue_depth, 1u);
  o.device_commands = static_cast<uint32_t>(std::min<uint64_t>(commands, UINT32_MAX));
  o.command_bytes = engine.max_command_bytes;
  o.limits = DefaultLaneLimits(o.device_commands);
  return o;
}

Status SchedulerOptions::Validate() const {
  if (device_commands == 0) return Status::Error(EINVAL, "io scheduler: device_commands is 0");
  if (command_bytes == 0 || command_bytes % kBlockSize != 0) {
    return Status::Error(EINVAL, "io scheduler: command_bytes " + std::to_string(command_bytes) +
                                     " is not a non-zero multiple of 4096");
  }
  for (size_t i = 0; i < kLaneCount; ++i) {
    if (limits[i].max_commands == 0 || limits[i].max_bytes == 0) {
      return Status::Error(EINVAL, std::string("io scheduler: lane ") +
                                       LaneName(static_cast<Lane>(i)) +
                                       " has a zero in-flight bound");
    }
  }
  const uint64_t background = uint64_t{limits[LaneIndex(Lane::kWrite)].max_commands} +
                              limits[LaneIndex(Lane::kPrefetch)].max_commands;
  if (background >= device_commands) {
    return Status::Error(
        EINVAL, "io scheduler: write + prefetch in-flight commands (" +
                    std::to_string(background) + ") must stay below the device's " +
                    std::to_string(device_commands) + ", or reads would queue behind them");
  }
  return Status::OK();
}

Scheduler::Scheduler(device::BlockIo& io, const SchedulerOptions& options)
    : io_(io),
      options_(options),
      slots_(static_cast<size_t>(io.device_count()) + 1),
      device_inflight_(slots_, 0),
      device_stats_(new DeviceStats[slots_]) {
  for (LaneState& s : lanes_) s.dev.assign(slots_, DeviceShare{});
  Status st = options_.Validate();
  if (!st.ok()) {
    std::fprintf(stderr, "kvfs: %s\n", st.ToString().c_str());
    std::abort();
  }
  cq_thread_ = std::thread([this] { CompletionLoop(); });
}

Scheduler::~Scheduler() {
  {
    MutexLock l(drain_mu_);
    while (outstanding_.load(std::memory_order_acquire) != 0) drained_cv_.Wait(l);
  }
  {
    MutexLock l(cq_mu_);
    cq_stop_ = true;
  }
  cq_cv_.NotifyAll();
  cq_thread_.join();
}

void Scheduler::Submit(Lane lane, std::span<device::IoRequest> reqs, CancelFlag cancel) {
  if (reqs.empty()) return;
  outstanding_.fetch_add(reqs.size(), std::memory_order_relaxed);
  const uint64_t now = SteadyNowNs();
  const size_t li = LaneIndex(lane);
  // Ops are built before taking mu_: allocation stays out of the lock.
  // Per-thread scratch, emptied before Submit() returns (no callback runs
  // inside it, so it never nests).
  thread_local std::vector<Op*> ops;
  for (device::IoRequest& r : reqs) {
    auto* op = new Op;
    op->req = std::move(r);
    op->cancel = cancel;
    op->lane = lane;
    op->submit_ns = now;
    if (op->req.op != device::IoOp::kFlush && op->req.len > options_.command_bytes) {
      op->commands = (op->req.len + options_.command_bytes - 1) / options_.command_bytes;
    }
    ops.push_back(op);
  }
  if (li >= kLaneCount) {
    for (Op* op : ops) {
      CompleteLater(op, Status::Error(EINVAL, "io scheduler: " + Describe(op->req) +
                                                  " submitted on unknown lane " +
                                                  std::to_string(li)));
    }
    ops.clear();
    return;
  }

  std::vector<Op*> dropped;
  std::vector<device::IoRequest>& batch = tls_dispatch;
  {
    MutexLock l(mu_);
    LaneState& s = lanes_[li];
    for (Op* op : ops) {
      s.queue.push_back(op);
      Queued(s, op);
    }
    Pump(&batch, &dropped);
  }
  ops.clear();
  Dispatch(&batch);
  // `done` must not run inside Submit().
  for (Op* op : dropped) CompleteLater(op, Cancelled(op->req));
}

void Scheduler::Queued(LaneState& s, const Op* op) {
  s.queued_bytes += op->req.len;
  s.dev[std::min<size_t>(op->req.device, s.dev.size() - 1)].queued++;
  if (op->req.group != nullptr) s.queued_groups[op->req.group]++;
}

void Scheduler::Unqueued(LaneState& s, const Op* op) {
  s.queued_bytes -= op->req.len;
  s.dev[std::min<size_t>(op->req.device, s.dev.size() - 1)].queued--;
  if (op->req.group == nullptr) return;
  auto it = s.queued_groups.find(op->req.group);
  if (--it->second == 0) s.queued_groups.erase(it);
}

size_t Scheduler::Promote(const void* group) {
  if (group == nullptr) return 0;
  size_t moved = 0;
  std::vector<Op*> dropped;
  std::vector<device::IoRequest>& batch = tls_dispatch;
  {
    MutexLock l(mu_);
    LaneState& from = lanes_[LaneIndex(Lane::kPrefetch)];
    LaneState& to = lanes_[LaneIndex(Lane::kRead)];
    auto g = from.queued_groups.find(group);
    if (g == from.queued_groups.end()) return 0;
    size_t left = g->second;
    const uint64_t now = SteadyNowNs();
    for (auto it = from.queue.begin(); left > 0 && it != from.queue.end();) {
      Op* op = *it;
      if (op->req.group != group) {
        ++it;
        continue;
      }
      it = from.queue.erase(it);
      Unqueued(from, op);  // may erase `g`
      --left;
      op->lane = Lane::kRead;
      op->submit_ns = now;  // the read lane's latency counts from here
      to.queue.push_back(op);
      Queued(to, op);
      ++moved;
    }
    Pump(&batch, &dropped);
  }
  if (moved == 0) return 0;
  stats_[LaneIndex(Lane::kPrefetch)].promoted.fetch_add(moved, std::memory_order_relaxed);
  Dispatch(&batch);
  for (Op* op : dropped) CompleteLater(op, Cancelled(op->req));
  return moved;
}

void Scheduler::Pump(std::vector<device::IoRequest>* dispatch, std::vector<Op*>* dropped) {
  uint64_t now = 0;
  const LaneState& rd = lanes_[LaneIndex(Lane::kRead)];
  const LaneState& pf = lanes_[LaneIndex(Lane::kPrefetch)];
  const bool reading = rd.inflight > 0 || !rd.queue.empty() || pf.inflight > 0 || !pf.queue.empty();
  // Devices whose room a higher lane's request is waiting for.
  std::vector<uint8_t>& device_blocked = tls_blocked;
  device_blocked.assign(slots_, 0);
  for (Lane lane : kLanePriority) {
    const size_t li = LaneIndex(lane);
    LaneState& s = lanes_[li];
    LaneLimit limit = options_.limits[li];
    if (lane == Lane::kWrite && reading) {
      limit.max_commands = std::max<uint32_t>(1, limit.max_commands / kWriteDivisorWhileReading);
    }
    // lane_full: devices this lane cannot dispatch to any more in this pass.
    // `open` counts the devices that have requests in this queue and may
    // still take one: the scan ends when it reaches 0, so a long queue for
    // one full device is not walked on every pass.
    std::vector<uint8_t>& lane_full = tls_full;
    lane_full.assign(slots_, 0);
    size_t open = 0;
    for (size_t d = 0; d < slots_; ++d) {
      if (device_blocked[d]) lane_full[d] = 1;
      else if (s.dev[d].queued > 0) ++open;
    }
    for (auto it = s.queue.begin(); it != s.queue.end() && open > 0;) {
      Op* op = *it;
      const size_t d = DeviceSlot(op->req.device);
      if (op->cancel && op->cancel->load(std::memory_order_acquire)) {
        it = s.queue.erase(it);
        Unqueued(s, op);
        if (!lane_full[d] && s.dev[d].queued == 0) --open;
        dropped->push_back(op);
        continue;
      }
      if (lane_full[d]) {  // an earlier request for this device waits: keep order
        ++it;
        continue;
      }
      DeviceShare& share = s.dev[d];
      const bool lane_room =
          share.inflight == 0 ||
          (share.commands + op->commands <= limit.max_commands &&
           share.bytes + op->req.len <= limit.max_bytes);
      // This lane waits for its own completions on d; lower lanes may still
      // use d, and this lane other devices.
      const bool device_room =
          device_inflight_[d] == 0 || device_inflight_[d] + op->commands <= options_.device_commands;
      if (!lane_room || !device_room) {
        lane_full[d] = 1;
        --open;
        // The head of a higher lane is first in line for d's room: nothing
        // below it may take what frees up meanwhile.
        if (lane_room) device_blocked[d] = 1;
        ++it;
        continue;
      }

      it = s.queue.erase(it);
      Unqueued(s, op);
      if (s.dev[d].queued == 0) --open;
      s.inflight++;
      s.inflight_commands += op->commands;
      s.inflight_bytes += op->req.len;
      share.inflight++;
      share.commands += op->commands;
      share.bytes += op->req.len;
      device_inflight_[d] += op->commands;
      if (now == 0) now = SteadyNowNs();
      op->dispatch_ns = now;

      device::IoRequest r;
      r.op = op->req.op;
      r.device = op->req.device;
      r.byte_off = op->req.byte_off;
      r.buf = op->req.buf;
      r.len = op->req.len;
      r.done = [this, op](Status st) { OnDeviceDone(op, std::move(st)); };
      dispatch->push_back(std::move(r));
    }
  }
}

void Scheduler::Dispatch(std::vector<device::IoRequest>* batch) {
  if (batch->empty()) return;
  io_.Submit(std::span<device::IoRequest>(batch->data(), batch->size()));
  batch->clear();
}

void Scheduler::OnDeviceDone(Op* op, Status st) {
  const uint64_t now = SteadyNowNs();
  const size_t li = LaneIndex(op->lane);
  LaneStats& stats = stats_[li];
  stats.ops.fetch_add(1, std::memory_order_relaxed);
  if (st.ok()) {
    stats.bytes.fetch_add(op->req.len, std::memory_order_relaxed);
  } else {
    stats.errors.fetch_add(1, std::memory_order_relaxed);
  }
  stats.latency.Record(now - op->submit_ns);
  stats.queue_wait.Record(op->dispatch_ns - op->submit_ns);
  DeviceStats& ds = device_stats_[DeviceSlot(op->req.device)];
  ds.ops.fetch_add(1, std::memory_order_relaxed);
  if (st.ok()) {
    ds.bytes.fetch_add(op->req.len, std::memory_order_relaxed);
  } else {
    // The operator must learn which device fails; a dead device fails every
    // command, so only the 1st, 2nd, 4th, 8th, ... error of each is logged.
    const uint64_t n = ds.errors.fetch_add(1, std::memory_order_relaxed) + 1;
    if ((n & (n - 1)) == 0) {
      spdlog::warn("device {}: {} failed: {} ({} error(s) on this device so far)",
                   op->req.device, Describe(op->req), st.ToString(), n);
    }
  }
  ds.latency.Record(now - op->submit_ns);

  // Room first, then the caller's `done`: the device gets its next work
  // without waiting for the callback.
  std::vector<Op*> dropped;
  std::vector<device::IoRequest>& batch = tls_dispatch;
  {
    MutexLock l(mu_);
    LaneState& s = lanes_[li];
    s.inflight--;
    s.inflight_commands -= op->commands;
    s.inflight_bytes -= op->req.len;
    const size_t d = DeviceSlot(op->req.device);
    DeviceShare& share = s.dev[d];
    share.inflight--;
    share.commands -= op->commands;
    share.bytes -= op->req.len;
    device_inflight_[d] -= op->commands;
    Pump(&batch, &dropped);
  }
  Dispatch(&batch);
  // On an engine thread and outside Submit(): dropped requests complete here.
  for (Op* d : dropped) CompleteUndispatched(d, Cancelled(d->req));

  {
    std::function<void(Status)> done = std::move(op->req.done);
    delete op;
    if (done) done(std::move(st));
    // `done` and what it captured are destroyed here, before FinishOne().
  }
  FinishOne();
}

void Scheduler::CompleteUndispatched(Op* op, Status st) {
  if (st.code() == ECANCELED) {
    stats_[LaneIndex(op->lane)].cancelled.fetch_add(1, std::memory_order_relaxed);
  }
  {
    std::function<void(Status)> done = std::move(op->req.done);
    delete op;
    if (done) done(std::move(st));
  }
  FinishOne();
}

void Scheduler::CompleteLater(Op* op, Status st) {
  {
    MutexLock l(cq_mu_);
    cq_.emplace_back(op, std::move(st));
  }
  cq_cv_.NotifyOne();
}

void Scheduler::CompletionLoop() {
  pthread_setname_np(pthread_self(), "kvfs-io-sched");
  MutexLock l(cq_mu_);
  while (true) {
    while (!cq_stop_ && cq_.empty()) cq_cv_.Wait(l);
    if (cq_.empty()) return;  // cq_stop_: the destructor saw nothing outstanding
    auto [op, st] = std::move(cq_.front());
    cq_.pop_front();
    l.Unlock();
    CompleteUndispatched(op, std::move(st));
    l.Lock();
  }
}

void Scheduler::Cancel(const CancelFlag& flag) {
  if (!flag) return;
  flag->store(true, std::memory_order_release);
  std::vector<Op*> dropped;
  {
    MutexLock l(mu_);
    for (LaneState& s : lanes_) {
      const size_t before = dropped.size();
      for (Op* op : s.queue) {
        if (op->cancel == flag) {
          Unqueued(s, op);
          dropped.push_back(op);
        }
      }
      if (dropped.size() == before) continue;
      std::erase_if(s.queue, [&flag](const Op* op) { return op->cancel == flag; });
    }
  }
  // Removing queued requests frees no device room: nothing to dispatch.
  for (Op* op : dropped) CompleteLater(op, Cancelled(op->req));
}

void Scheduler::FinishOne() {
  // Down to 1 and below without a lock; the last decrement under drain_mu_,
  // so the destructor (which checks under drain_mu_) cannot return before
  // this thread has stopped touching the scheduler.
  uint64_t v = outstanding_.load(std::memory_order_relaxed);
  while (v > 1) {
    if (outstanding_.compare_exchange_weak(v, v - 1, std::memory_order_acq_rel)) return;
  }
  MutexLock l(drain_mu_);
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) drained_cv_.NotifyAll();
}

Status Scheduler::ReadSync(Lane lane, uint32_t device, uint64_t byte_off, void* buf, size_t len) {
  return LaneIo(*this, lane).ReadSync(device, byte_off, buf, len);
}

Status Scheduler::WriteSync(Lane lane, uint32_t device, uint64_t byte_off, const void* buf,
                            size_t len) {
  return LaneIo(*this, lane).WriteSync(device, byte_off, buf, len);
}

Status Scheduler::FlushSync(Lane lane, uint32_t device) {
  return LaneIo(*this, lane).FlushSync(device);
}

uint64_t Scheduler::LaneBytes(Lane lane) const {
  const size_t li = LaneIndex(lane);
  if (li >= kLaneCount) return 0;
  MutexLock l(mu_);
  return lanes_[li].queued_bytes + lanes_[li].inflight_bytes;
}

std::array<LaneSnapshot, kLaneCount> Scheduler::Snapshot() const {
  std::array<LaneSnapshot, kLaneCount> out;
  {
    MutexLock l(mu_);
    for (size_t i = 0; i < kLaneCount; ++i) {
      const LaneState& s = lanes_[i];
      out[i].inflight = s.inflight;
      out[i].inflight_commands = s.inflight_commands;
      out[i].inflight_bytes = s.inflight_bytes;
      out[i].queued = static_cast<uint32_t>(s.queue.size());
      out[i].queued_bytes = s.queued_bytes;
    }
  }
  for (size_t i = 0; i < kLaneCount; ++i) {
    const LaneStats& st = stats_[i];
    out[i].ops = st.ops.load(std::memory_order_relaxed);
    out[i].bytes = st.bytes.load(std::memory_order_relaxed);
    out[i].errors = st.errors.load(std::memory_order_relaxed);
    out[i].cancelled = st.cancelled.load(std::memory_order_relaxed);
    out[i].promoted = st.promoted.load(std::memory_order_relaxed);
    out[i].latency = st.latency.Snapshot();
    out[i].queue_wait = st.queue_wait.Snapshot();
  }
  return out;
}

std::vector<DeviceSnapshot> Scheduler::DeviceSnapshots() const {
  std::vector<DeviceSnapshot> out(slots_ - 1);
  {
    MutexLock l(mu_);
    for (size_t d = 0; d < out.size(); ++d) {
      out[d].inflight_commands = device_inflight_[d];
      for (const LaneState& s : lanes_) out[d].inflight_bytes += s.dev[d].bytes;
    }
    for (const LaneState& s : lanes_) {
      for (const Op* op : s.queue) {
        size_t d = DeviceSlot(op->req.device);
        if (d < out.size()) out[d].queued++;
      }
    }
  }
  for (size_t d = 0; d < out.size(); ++d) {
    const DeviceStats& st = device_stats_[d];
    out[d].ops = st.ops.load(std::memory_order_relaxed);
    out[d].bytes = st.bytes.load(std::memory_order_relaxed);
    out[d].errors = st.errors.load(std::memory_order_relaxed);
    out[d].latency = st.latency.Snapshot();
  }
  return out;
}

}  // namespace kvfs::io
