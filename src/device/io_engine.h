// IoEngine: io_uring over the O_DIRECT fds of a volume's devices.
//
// Several rings (each with one completion thread) so that one submitting ring
// is not the ceiling. A request larger than `max_command_bytes` is split into
// commands that are spread over the rings and issued together; each ring keeps
// at most `queue_depth` commands in flight and queues the rest. Short
// transfers are resubmitted for the remainder. Buffers that lie inside
// registered memory (the staging pool, buffers(), and RegisterRegion()) use
// READ_FIXED/WRITE_FIXED.
// Work that a `done` callback submits stays on its completion thread's ring
// while that ring has room, and is handed to the kernel by the same
// io_uring_enter with which the thread next waits (one syscall per I/O for
// callback-driven chains, as a single-threaded fio loop has).
//
// Thread safety: Submit() may be called from any thread, including from a
// `done` callback. The destructor waits for every queued and in-flight
// request to complete (their callbacks run) before returning; it must not be
// called from a `done` callback, and no thread other than those callbacks may
// call Submit() once it has started.
//
// Invalid requests (unaligned, empty read/write, unknown device, a range past
// the end of the device) fail with EINVAL through `done`, on an engine
// thread, like any other error; a write to a read-only device fails with
// EROFS. A request's errors name the device path and byte offset.
//
//   auto engine = IoEngine::Create({dev.get()}, IoEngineOptions{});
//   PoolBuffer buf = (*engine)->buffers().Acquire();
//   IoRequest req{.op = IoOp::kRead, .device = 0, .byte_off = off,
//                 .buf = buf.data(), .len = buf.size(),
//                 .done = [](Status st) { /* on an engine thread */ }};
//   (*engine)->Submit(std::span(&req, 1));
#pragma once

#include <memory>
#include <vector>

#include "device/block_device.h"
#include "device/block_io.h"
#include "device/buffer_pool.h"

namespace kvfs::device {

struct IoEngineOptions {
  unsigned rings = 0;               // 0: sized to the machine (cores, 2..8)
  unsigned queue_depth = 64;        // in-flight commands per ring, 1..4096
  size_t max_command_bytes = 1 << 20;  // multiple of kBlockSize, <= 1 GiB
  size_t staging_pool_bytes = 256 << 20;  // registered buffers; 0 disables
  size_t staging_slot_bytes = 1 << 20;    // BufferPool slot size
};

// Counters since Create(), for tests and stats. Monotonic except
// max_ring_inflight, which is a high-water mark.
struct IoEngineStats {
  uint64_t requests = 0;         // requests accepted by Submit()
  uint64_t commands = 0;         // device commands they were split into
  uint64_t fixed_commands = 0;   // of which used READ_FIXED/WRITE_FIXED
  uint64_t short_transfers = 0;  // remainders resubmitted after a short transfer
  uint64_t eagain_retries = 0;   // commands reissued after -EAGAIN
  uint64_t max_ring_inflight = 0;  // most commands in flight on one ring
};

class IoEngine : public BlockIo {
 public:
  // `devices` must outlive the engine. Fails with the errno of
  // io_uring_queue_init / buffer registration, with context.
  static Result<std::unique_ptr<IoEngine>> Create(std::vector<const BlockDevice*> devices,
                                                  const IoEngineOptions& options);
  ~IoEngine() override;

  void Submit(std::span<IoRequest> reqs) override;
  uint32_t device_count() const override;

  // The registered staging pool. Valid for the engine's lifetime.
  // REQUIRES: options.staging_pool_bytes > 0.
  BufferPool& buffers();
  // Registers [base, base + len) with every ring, so that commands whose
  // buffer lies in it (within one 1 GiB piece) use READ_FIXED/WRITE_FIXED
  // and skip the kernel's per-I/O page pinning. On the dev VM reads into
  // the registered huge-page pool ran 1.5-1.8x faster than into ordinary
  // buffers (bench/engine_bench); registering 4 KiB-page memory alone
  // gained nothing measurable: the huge pages count. The kernel pins the pages
  // (they count against RLIMIT_MEMLOCK without CAP_IPC_LOCK). Memory that is
  // not registered works as before. Errors: ENOSPC when the table (1024
  // slots; a region takes one per started GiB) is full, or the kernel's
  // (ENOMEM: the memlock limit). The staging pool is registered by Create().
  Status RegisterRegion(const void* base, size_t len);
  // Ends every registration whose region starts in [base, base + len).
  // REQUIRES: no I/O into those regions is submitted or in flight (a
  // command queued in the engine would find its slot empty: EFAULT), and
  // none of them is being registered.
  void UnregisterRegions(const void* base, size_t len);
  // The options in effect (rings resolved to the actual ring count).
  const IoEngineOptions& options() const;
  IoEngineStats stats() const;

  // Implementation details follow.
  class Impl;

 private:
  explicit IoEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfs::device
