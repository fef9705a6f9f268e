// BlockIo: the asynchronous I/O interface of the data path.
//
// IoEngine (io_engine.h) is the real implementation over io_uring;
// FaultInjectingIo (fault_injecting_io.h) wraps any BlockIo to inject errors
// and simulate power cuts in tests. Everything above device/ talks to BlockIo.
//
// Contract of Submit():
//   - Never blocks on I/O and never blocks because a ring is full: requests
//     beyond the in-flight bound wait in a queue inside the engine.
//   - Every request's `done` runs exactly once, on an engine thread (never
//     inside Submit()), with OK or the first error of its commands (errno
//     preserved: EIO, ENOSPC, ...). Short transfers are retried internally; a
//     transfer that makes no progress ends with EIO.
//   - `done` must not block on I/O; it may call Submit().
//   - The buffer must stay valid and untouched until `done` runs.
//   - kFlush makes durable every write whose `done` ran before the flush was
//     submitted (fdatasync semantics). Callers order a flush after the writes
//     it must cover by submitting it from those writes' completion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "common/status.h"

namespace kvfs::device {

enum class IoOp : uint8_t { kRead, kWrite, kFlush };

struct IoRequest {
  IoOp op = IoOp::kRead;
  uint32_t device = 0;    // index into the devices the engine was built with
  uint64_t byte_off = 0;  // kBlockSize aligned (ignored for kFlush)
  void* buf = nullptr;    // kBlockSize aligned (ignored for kFlush)
  size_t len = 0;         // multiple of kBlockSize (0 for kFlush)
  std::function<void(Status)> done;
  // What the request is for (a cache entry, say), so that io::Scheduler can
  // promote it (Scheduler::Promote); the engine ignores it.
  const void* group = nullptr;
};

class BlockIo {
 public:
  virtual ~BlockIo() = default;

  // Queues every request of `reqs` (moved from) and returns. Requests of one
  // call are submitted together (one syscall per ring where possible).
  virtual void Submit(std::span<IoRequest> reqs) = 0;

  // Number of devices requests may name.
  virtual uint32_t device_count() const = 0;

  // Blocking helpers built on Submit(), for tools and tests: they return the
  // status `done` would have received. Never call them from a `done`
  // callback (the completion thread would wait for itself).
  Status ReadSync(uint32_t device, uint64_t byte_off, void* buf, size_t len);
  Status WriteSync(uint32_t device, uint64_t byte_off, const void* buf, size_t len);
  Status FlushSync(uint32_t device);
};

}  // namespace kvfs::device
