// VerifyExtents: reads every extent of a list at queue depth and computes
// its crc32c (fsck --verify-data).
//
// Extents that are adjacent on a device (gaps up to `max_gap_bytes` are read
// and discarded) are read together, up to `read_bytes` per request; the
// IoEngine splits each request into `command_bytes` commands spread over its
// rings, and `inflight_reads` requests are kept in flight, each into a slot of
// the engine's registered buffer pool. Checksums are computed on the engine's
// completion threads as data lands, so reading and checking overlap. A request
// that fails is retried extent by extent so that an error names the extents
// that really cannot be read.
//
// Thread safety: VerifyExtents blocks the calling thread until every read
// completed; `progress` is called from that thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"
#include "device/block_device.h"
#include "device/block_io.h"
#include "fsck/progress.h"

namespace kvfs::fsck {

struct VerifyItem {
  uint32_t device = 0;
  uint64_t byte_off = 0;  // kBlockSize aligned
  uint64_t len = 0;       // kBlockSize multiple, > 0
  uint32_t expected_crc = 0;
  // Results.
  uint32_t actual_crc = 0;
  int error = 0;  // positive errno if the bytes could not be read
  bool ok() const { return error == 0 && actual_crc == expected_crc; }
};

struct VerifyOptions {
  size_t read_bytes = 8 << 20;     // largest request
  size_t command_bytes = 1 << 20;  // largest device command
  unsigned inflight_reads = 16;    // requests in flight
  unsigned rings = 0;              // 0: the engine's default
  unsigned queue_depth = 64;       // commands in flight per ring
  size_t max_gap_bytes = 64 << 10;
  // Tests: every read goes through the BlockIo this returns, wrapping the
  // engine (a device::FaultInjectingIo that fails chosen ranges). The
  // wrapper is destroyed before the engine. Null: reads go to the engine.
  std::function<std::unique_ptr<device::BlockIo>(device::BlockIo&)> wrap_io;
};

struct VerifyStats {
  uint64_t bytes_read = 0;  // including gaps read between extents
  uint64_t requests = 0;
  double seconds = 0;
};

// `items` must be sorted by (device, byte_off) and must not overlap.
// Fills each item's results. Fails only if the engine cannot be set up (or
// a buffer not allocated): an extent that cannot be read is a result (its
// `error`), never a reason to stop.
Result<VerifyStats> VerifyExtents(const std::vector<const device::BlockDevice*>& devices,
                                  std::vector<VerifyItem>* items, const VerifyOptions& options,
                                  Progress* progress);

}  // namespace kvfs::fsck
