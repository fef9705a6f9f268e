// The parts of a volume and the checks that they belong together, shared by
// Volume::Open (the daemon, mkfs's reopen) and fsck, which opens the parts
// itself because it must look at states Volume::Open refuses.
//
// Each check returns OK or EINVAL with a message naming the device or
// directory that is wrong.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "device/block_device.h"
#include "device/superblock.h"
#include "index/index.h"

namespace kvfs::volume {

// The index directory of a volume whose first device is `first`: `given`
// when not empty; else "<first>.index" for an image file, and EINVAL for a
// block device (which has no "beside"). The one place of the default.
Result<std::string> IndexDirFor(const device::BlockDevice& first, const std::string& given);

// `sbs[i]` is the superblock of `devices[i]`, ordered by device index: they
// must be every device of one volume (same volume and index UUIDs, the
// count and each index as recorded), each data region inside its device.
Status CheckOneVolume(const std::vector<std::unique_ptr<device::BlockDevice>>& devices,
                      const std::vector<device::Superblock>& sbs);

// Opens the index in `dir` and checks it is the one `sb0` (device
// `first_path`'s superblock) names: "foreign index" (EINVAL) otherwise, or
// a device count that differs. Errors of Index::Open are returned as they
// are (ENOENT for a missing index, EBUSY for one in use, ...).
Result<std::unique_ptr<index::Index>> OpenIndexOf(const std::string& dir,
                                                  const device::Superblock& sb0,
                                                  const std::string& first_path,
                                                  const index::Index::Options& options);

}  // namespace kvfs::volume
