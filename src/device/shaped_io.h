// ShapedIo: a BlockIo that wraps another one (normally the real IoEngine) and
// makes each device behave, in time, like an NVMe drive of a given speed, so
// that N image files on one disk can show what N drives would do. Tests and
// benchmarks only (mount option -o shape, kvfs(8)).
//
// Every request still goes to the inner BlockIo at once and moves the real
// bytes; only its `done` is held back until the modelled drive would have
// finished it:
//
//   start    = max(submit time, when the device's transfer pipe is free)
//   pipe     = start + len / bandwidth        (the device moves one
//              command's bytes at a time, at its bandwidth ceiling)
//   done at  = max(pipe + latency, when the inner I/O really completed)
//
// so commands overlap their fixed per-command latency (queue depth helps, as
// on NVMe) but share one bandwidth ceiling per device. A kFlush costs the
// latency alone. Devices are independent: a slow device delays only the
// requests that name it.
//
// Thread safety: all methods may be called from any thread. `inner` must
// outlive the wrapper. `done` runs on an inner engine thread (when it is
// already late) or on the wrapper's timer thread. The destructor waits until
// every request submitted through it has completed; it must not run inside
// a `done`.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "device/block_io.h"

namespace kvfs::device {

// The modelled drive. 80 us and 2 GB/s: a mid-range PCIe 3 NVMe drive's
// 4 KiB random read latency and sequential bandwidth.
struct DeviceShape {
  uint64_t latency_ns = 80'000;
  uint64_t bytes_per_s = 2'000'000'000;
};

// Parses "LAT_US:MB_S[:DEVICE][/...]" (MB = 10^6 bytes): a rule without
// DEVICE applies to every device, one with DEVICE (0-based) overrides it for
// that device; "" gives every device the default shape. EINVAL naming the
// rule if it is malformed or names a device past `devices`.
Result<std::vector<DeviceShape>> ParseDeviceShapes(const std::string& spec, uint32_t devices);

class ShapedIo : public BlockIo {
 public:
  // `shapes[d]` for device d; devices past its end get DeviceShape{}.
  // `now_ns`: the clock the model runs on; tests step one of their own (and
  // call ClockMoved() after each step). By default the steady clock.
  ShapedIo(BlockIo& inner, std::vector<DeviceShape> shapes,
           std::function<uint64_t()> now_ns = {});
  ~ShapedIo() override;
  ShapedIo(const ShapedIo&) = delete;
  ShapedIo& operator=(const ShapedIo&) = delete;

  void Submit(std::span<IoRequest> reqs) override;
  uint32_t device_count() const override { return inner_.device_count(); }

  const DeviceShape& shape(uint32_t device) const { return shapes_[device]; }
  // Test clock: its time moved on. Returns once every request due by now
  // has completed (its `done` returned), on this thread or the timer's.
  void ClockMoved();

 private:
  struct Due {
    uint64_t at_ns;
    std::function<void(Status)> done;
    Status st;
    bool operator>(const Due& o) const { return at_ns > o.at_ns; }
  };
  void TimerLoop();
  uint64_t NowNs() const;
  void Finish(std::function<void(Status)>& done, Status st);
  // The earliest due request, taken out to run its `done` unlocked; then
  // DoneReturned(). REQUIRES: mu_ held, due_ not empty.
  Due PopDue() REQUIRES(mu_);
  void DoneReturned() REQUIRES(mu_);

  BlockIo& inner_;
  std::vector<DeviceShape> shapes_;  // one per device
  const std::function<uint64_t()> now_ns_;

  Mutex mu_;
  CondVar cv_;
  std::vector<uint64_t> pipe_free_ns_ GUARDED_BY(mu_);  // per device
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_ GUARDED_BY(mu_);
  uint64_t outstanding_ GUARDED_BY(mu_) = 0;  // `done`s not yet returned
  uint64_t calling_ GUARDED_BY(mu_) = 0;      // `done`s popped from due_, running
  bool stop_ GUARDED_BY(mu_) = false;
  CondVar idle_cv_;

  std::thread timer_;  // last: started once everything above exists
};

}  // namespace kvfs::device
