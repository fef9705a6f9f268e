// FormatVolume: what mkfs.kvfs does -- write superblocks and create the index.
//
// Every check happens before anything is written, so a refusal leaves the
// devices and the index directory untouched:
//   - a missing device without `size_bytes` (ENOENT), a size that is not a
//     multiple of kBlockSize (EINVAL), a device smaller than kMinDeviceBytes
//     (EINVAL);
//   - a device that already holds a kvfs volume or another filesystem
//     signature (EEXIST), unless `force`;
//   - an index directory that already holds an index (EEXIST, unless
//     `force`, which then replaces it) or cannot be written (EACCES/...);
//   - a block device without an explicit index directory (EINVAL).
// The index is created before the superblocks are written: a crash between
// the two leaves devices that do not name the new index, which mount refuses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/uuid.h"

namespace kvfs::volume {

struct FormatOptions {
  std::string index_dir;   // empty: DefaultIndexDir(devices[0])
  uint64_t size_bytes = 0; // >0: create or extend image files to this size
  bool force = false;
  uint32_t root_uid = 0;
  uint32_t root_gid = 0;
};

struct FormatResult {
  Uuid volume_uuid;
  Uuid index_uuid;
  std::string index_dir;
  uint64_t data_bytes = 0;  // total data region
};

Result<FormatResult> FormatVolume(const std::vector<std::string>& devices,
                                  const FormatOptions& options);

// AddDevice: what mkfs.kvfs --add does -- makes `new_device` device N of the
// unmounted volume whose N devices are `devices` (all of them, any order).
// The new device gets no data; the placement rule (placement.h) fills it
// first from the next mount on, until it is as full as the others.
//
// Refused before anything is written: devices that are not one whole volume
// (volume_parts.h), a mounted volume (EBUSY: its devices are locked), a new
// device that holds a signature (EEXIST unless `force`), is missing without
// `size_bytes` (ENOENT) or is too small (EINVAL).
// Writes, in this order: the new device's superblock, the index's volume
// record (synced), the old devices' superblocks. A crash after the first
// leaves the old volume mountable as it was; after the second, mount refuses
// the count mismatch and running the same --add again (with --force, the
// new device now has a superblock) completes it.
struct AddResult {
  uint32_t device_index = 0;  // of the new device
  uint64_t data_bytes = 0;    // its data region
};
Result<AddResult> AddDevice(const std::vector<std::string>& devices, const std::string& new_device,
                            const FormatOptions& options);

}  // namespace kvfs::volume
