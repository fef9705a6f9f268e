// Volume: a kvfs volume opened for use -- its devices, their superblocks, the
// index they belong to, the I/O engine over them, and free space.
//
// Open() refuses, with a message that says which part is wrong:
//   - a device that is not kvfs (superblock errors from device/),
//   - devices of different volumes, a missing or duplicate device index,
//   - an index that is missing (ENOENT) or belongs to another volume (EINVAL),
//   - a volume already opened read-write elsewhere (EBUSY: the devices are
//     flock()ed exclusively while open read-write).
// Then it reclaims orphans (files unlinked while open, or O_TMPFILE files
// not linked yet, when the last mount ended without closing them) and rebuilds free space as the data regions
// minus every extent the index references.
//
// Thread safety: all methods are safe from any thread. The Volume must
// outlive everything that uses io(), buffers() or index().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alloc/extent_allocator.h"
#include "common/extent.h"
#include "common/status.h"
#include "device/block_device.h"
#include "device/block_io.h"
#include "device/io_engine.h"
#include "device/shaped_io.h"
#include "device/superblock.h"
#include "index/index.h"
#include "volume/placement.h"

namespace kvfs::volume {

struct VolumeOptions {
  // Empty: "<first device>.index" for an image file; required for a block
  // device.
  std::string index_dir;
  device::IoEngineOptions engine;
  size_t index_cache_bytes = 256 << 20;
  // Opens devices O_RDONLY, takes no lock, opens the index read-only and
  // reclaims nothing (fsck -n, also on a mounted volume).
  bool read_only = false;
  // With read_only (a read-only mount): holds a shared lock on the devices
  // while open, so that nothing opens the volume read-write meanwhile
  // (EBUSY), and fails with EBUSY while something has it open read-write.
  bool shared_lock = false;
  // Tests: interposes a wrapper (fault injection) between the volume's
  // users and the real engine. Gets the engine; returns what io() serves.
  std::function<std::unique_ptr<device::BlockIo>(device::BlockIo&)> wrap_io;
  // Tests and benchmarks: non-empty puts a device::ShapedIo (one shape per
  // device) over the real engine, below wrap_io, so that image files behave
  // like drives of that speed.
  std::vector<device::DeviceShape> shapes;
};

// The data space of one device: its region and what of it is free.
struct DeviceSpace {
  uint64_t total_bytes = 0;  // the data region
  uint64_t free_bytes = 0;
  uint64_t largest_free = 0;
};

// Read in one pass: the volume's figures are the sums (largest: the
// maximum) of its devices' figures.
struct SpaceStats {
  uint64_t total_bytes = 0;  // sum of data regions
  uint64_t free_bytes = 0;
  uint64_t largest_free = 0;
  uint64_t free_extents = 0;
  std::vector<DeviceSpace> devices;  // by device index
};

// The index directory used when none is given, or EINVAL for a block device
// (volume_parts.h IndexDirFor: the one rule).
Result<std::string> DefaultIndexDir(const std::string& first_device);

class Volume {
 public:
  // `device_paths` in any order; all devices of the volume must be given.
  static Result<std::unique_ptr<Volume>> Open(const std::vector<std::string>& device_paths,
                                              const VolumeOptions& options);
  // Drains the engine (every in-flight request completes), then closes the
  // index and the devices.
  ~Volume();

  index::Index& index() { return *index_; }
  device::BlockIo& io() { return *io_; }
  // The engine's registered staging pool (bounded dirty memory).
  device::BufferPool& buffers() { return engine_->buffers(); }
  // IoEngine::RegisterRegion / UnregisterRegions: memory that device I/O
  // uses without per-I/O page pinning (the RAM cache's arena).
  Status RegisterMemory(const void* base, size_t len) { return engine_->RegisterRegion(base, len); }
  void UnregisterMemory(const void* base, size_t len) { engine_->UnregisterRegions(base, len); }
  const std::vector<device::Superblock>& superblocks() const { return superblocks_; }
  // The engine's options with the ring count resolved.
  const device::IoEngineOptions& engine_options() const { return engine_->options(); }
  const std::vector<std::unique_ptr<device::BlockDevice>>& devices() const { return devices_; }
  bool read_only() const { return read_only_; }
  // Number of orphans reclaimed by Open().
  uint64_t reclaimed_orphans() const { return reclaimed_orphans_; }

  // Allocates `bytes` (rounded up to kBlockSize) of free space, on the
  // device placement.h's rule picks for `hint`, preferring one extent.
  // ENOSPC if no device has room (nothing is allocated then).
  Result<std::vector<Extent>> Allocate(uint64_t bytes, const PlacementHint& hint = {});
  // Returns extents to free space. EINVAL if one was already free (the
  // others are still freed); callers treat that as a bug to report.
  Status Free(const std::vector<Extent>& extents);
  SpaceStats space() const;

 private:
  Volume() = default;
  Status ReclaimOrphans();
  Status RebuildFreeSpace();

  bool read_only_ = false;
  std::vector<std::unique_ptr<device::BlockDevice>> devices_;  // by device index
  std::vector<device::Superblock> superblocks_;                 // by device index
  std::unique_ptr<index::Index> index_;
  std::vector<std::unique_ptr<alloc::ExtentAllocator>> allocators_;  // by device index
  std::unique_ptr<device::IoEngine> engine_;
  std::unique_ptr<device::ShapedIo> shaped_;  // optional, wraps engine_
  std::unique_ptr<device::BlockIo> wrapper_;  // optional, wraps shaped_ or engine_
  device::BlockIo* io_ = nullptr;             // wrapper_, shaped_ or engine_
  uint64_t reclaimed_orphans_ = 0;
};

}  // namespace kvfs::volume
