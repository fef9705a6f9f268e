// Placement: which device a file's chunk goes to on a volume of N devices.
//
// The rule (docs/devices.md):
//   1. Chunk i of a file prefers device (mix(seed) + i) mod N, where seed is
//      the file's inode number (or, for a whole-file write whose inode does
//      not exist yet, a hash of its parent and name). A large file thus
//      stripes over every device, 1 MiB chunk by chunk, so one load of it
//      reads all devices at once; consecutive keys of a serial loop start
//      on different devices.
//   2. Space stays balanced: if the preferred device has less free space
//      than the device with the most free space by more than kBalanceSlack
//      of that device's data region (or cannot hold the chunk), the chunk
//      goes to the device with the most free space instead (then the next
//      most, ...). A device just added to a volume is therefore filled
//      first until it catches up, and deletes leave no lasting skew.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvfs::volume {

// What a caller of Volume::Allocate knows about the space it asks for.
struct PlacementHint {
  uint64_t seed = 0;   // the file (inode number, or a hash naming it)
  uint64_t chunk = 0;  // chunk index within the file
};

// 1/kBalanceSlack of a device's data region (1/32: ~3%).
inline constexpr uint64_t kBalanceSlack = 32;

// The device chunk `hint.chunk` of file `hint.seed` prefers, of `n` (> 0).
uint32_t PreferredDevice(const PlacementHint& hint, uint32_t n);

// Devices in the order to try for a chunk: the preferred device first
// unless it is more than the slack behind the most free one (see the top),
// then the others by free space, most first. `free_bytes[d]` and
// `region_bytes[d]` per device.
std::vector<uint32_t> PlacementOrder(const PlacementHint& hint,
                                     const std::vector<uint64_t>& free_bytes,
                                     const std::vector<uint64_t>& region_bytes);

// A seed for a file known only by its parent directory and name.
uint64_t NameSeed(uint64_t parent_ino, const void* name, size_t len);

}  // namespace kvfs::volume
