// On-device format constants. Changing any of these changes the format:
// bump kFormatVersion.
#pragma once

#include <cstdint>

namespace kvfs {

inline constexpr uint64_t kBlockSize = 4096;
inline constexpr uint64_t kSuperblockSize = 4096;
// "KVFS" + "SB01" as a little-endian u64.
inline constexpr uint64_t kSuperblockMagic = 0x31304253'5346564bULL;
inline constexpr uint32_t kFormatVersion = 1;
// The data region starts here on every device; the gap after the superblock
// keeps data 1 MiB aligned (NVMe-friendly) and leaves room for the future.
inline constexpr uint64_t kDataStart = 1 << 20;
// The smallest device mkfs accepts: superblock area plus 16 MiB of data.
inline constexpr uint64_t kMinDeviceBytes = kDataStart + (16 << 20);
// Inode number of the root directory.
inline constexpr uint64_t kRootIno = 1;
inline constexpr uint32_t kMaxNameLen = 255;

inline constexpr uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
inline constexpr uint64_t AlignDown(uint64_t v, uint64_t a) { return v / a * a; }
// Memory O_DIRECT can move to or from in place.
inline bool IsBlockAligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kBlockSize == 0;
}

}  // namespace kvfs
