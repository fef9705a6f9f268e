// Opening a volume for fsck: devices, superblocks and the index, with the
// checks of volume/volume_parts.h (those Volume::Open makes) but without
// Volume::Open itself. Volume::Open refuses exactly the states fsck must look at
// (overlapping extents make its free-space rebuild fail) and reclaims orphans
// before anyone could see them, so fsck opens the parts itself.
//
// Check only (repair == false): devices are opened read-only and a shared
// flock is tried; if the volume is in use (mounted: the mount holds an
// exclusive flock), OpenedVolume::mounted is set and checking goes on without
// the lock. The index is opened read-only (a RocksDB secondary instance, safe
// beside the daemon's read-write instance): the view is the index as of the
// open.
// Repair: devices read-write with an exclusive flock and the index read-write;
// a mounted volume is refused with EBUSY and a message saying to unmount it
// or to check with -n.
//
// Result: the opened volume, or
//   - EUCLEAN with one kSuperblock finding per damaged device appended to
//     `findings` (the volume cannot be checked further);
//   - any other error (operational): a device or the index cannot be opened
//     or read, the devices do not form one whole volume, the index is missing
//     or foreign, the volume is in use while repairing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/extent.h"
#include "common/status.h"
#include "device/block_device.h"
#include "device/superblock.h"
#include "fsck/finding.h"
#include "index/index.h"

namespace kvfs::fsck {

struct OpenOptions {
  std::vector<std::string> devices;
  std::string index_dir;  // empty: "<first device>.index" for an image file
  bool repair = false;
  size_t index_cache_bytes = 64 << 20;
};

struct OpenedVolume {
  std::vector<std::unique_ptr<device::BlockDevice>> devices;  // by device index
  std::vector<device::Superblock> superblocks;                 // by device index
  std::unique_ptr<index::Index> index;
  std::string index_dir;
  bool mounted = false;

  const device::Superblock& sb(uint32_t device) const { return superblocks[device]; }
};

Result<std::unique_ptr<OpenedVolume>> OpenForCheck(const OpenOptions& options,
                                                   std::vector<Finding>* findings);

// kBlockSize-aligned heap memory for synchronous O_DIRECT I/O.
struct FreeDeleter {
  void operator()(char* p) const;
};
using AlignedBuffer = std::unique_ptr<char, FreeDeleter>;
// ENOMEM if it cannot be allocated.
Result<AlignedBuffer> AllocAligned(size_t len);

// Reads the bytes of `e` synchronously (pread; for the few extents the
// checks look at, not the --verify-data path). EINVAL for an extent on a
// device the volume does not have.
Result<AlignedBuffer> ReadExtent(const OpenedVolume& v, const Extent& e);

}  // namespace kvfs::fsck
