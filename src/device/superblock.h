// The 4 KiB superblock at offset 0 of every device of a volume.
//
// Layout (little-endian, see superblock.cc): magic, format version, volume
// UUID, index UUID, device index and count, block size, data-region start and
// length, then zero padding; the last 4 bytes are the crc32c of the first
// 4092. Decode() rejects a bad checksum, magic or version with EINVAL (EUCLEAN
// for a checksum mismatch) and a message that names the device.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/uuid.h"

namespace kvfs::device {

struct Superblock {
  uint32_t format_version = 0;
  Uuid volume_uuid;
  Uuid index_uuid;
  uint32_t device_index = 0;
  uint32_t device_count = 0;
  uint32_t block_size = 0;
  uint64_t data_start = 0;   // bytes
  uint64_t data_length = 0;  // bytes

  // Exactly kSuperblockSize bytes, checksum included.
  std::string Encode() const;
  // `device_name` is only used in error messages.
  static Result<Superblock> Decode(std::string_view block, std::string_view device_name);
  bool operator==(const Superblock&) const = default;
};

}  // namespace kvfs::device
