#include "device/superblock.h"

#include <cstdio>
#include <cstring>

#include "common/crc32c.h"
#include "common/endian.h"
#include "common/format.h"

namespace kvfs::device {

namespace {

// Byte offsets inside the 4 KiB block. The crc covers [0, kCrcOffset).
constexpr size_t kMagicOffset = 0;           // u64
constexpr size_t kVersionOffset = 8;         // u32
constexpr size_t kBlockSizeOffset = 12;      // u32
constexpr size_t kVolumeUuidOffset = 16;     // 16 bytes
constexpr size_t kIndexUuidOffset = 32;      // 16 bytes
constexpr size_t kDeviceIndexOffset = 48;    // u32
constexpr size_t kDeviceCountOffset = 52;    // u32
constexpr size_t kDataStartOffset = 56;      // u64
constexpr size_t kDataLengthOffset = 64;     // u64
constexpr size_t kEncodedEnd = 72;           // zero padding from here
constexpr size_t kCrcOffset = kSuperblockSize - 4;

static_assert(kEncodedEnd <= kCrcOffset, "superblock fields overlap the checksum");
static_assert(sizeof(Uuid{}.bytes) == 16, "UUIDs are 16 bytes on the device");

Status Invalid(std::string_view device_name, const std::string& what) {
  return Status::Error(EINVAL, std::string(device_name) + ": " + what);
}

}  // namespace

std::string Superblock::Encode() const {
  std::string block(kSuperblockSize, '\0');
  char* p = block.data();
  EncodeFixed64(p + kMagicOffset, kSuperblockMagic);
  EncodeFixed32(p + kVersionOffset, format_version);
  EncodeFixed32(p + kBlockSizeOffset, block_size);
  std::memcpy(p + kVolumeUuidOffset, volume_uuid.bytes.data(), 16);
  std::memcpy(p + kIndexUuidOffset, index_uuid.bytes.data(), 16);
  EncodeFixed32(p + kDeviceIndexOffset, device_index);
  EncodeFixed32(p + kDeviceCountOffset, device_count);
  EncodeFixed64(p + kDataStartOffset, data_start);
  EncodeFixed64(p + kDataLengthOffset, data_length);
  EncodeFixed32(p + kCrcOffset, Crc32c(p, kCrcOffset));
  return block;
}

Result<Superblock> Superblock::Decode(std::string_view block, std::string_view device_name) {
  if (block.size() != kSuperblockSize) {
    return Invalid(device_name, "superblock must be " + std::to_string(kSuperblockSize) +
                                    " bytes, got " + std::to_string(block.size()));
  }
  const char* p = block.data();
  // Magic before checksum: a block that is not ours at all should say so,
  // not report "corruption" of something that never was a kvfs superblock.
  if (DecodeFixed64(p + kMagicOffset) != kSuperblockMagic) {
    return Invalid(device_name, "not a kvfs device (bad magic)");
  }
  uint32_t stored_crc = DecodeFixed32(p + kCrcOffset);
  uint32_t actual_crc = Crc32c(p, kCrcOffset);
  if (stored_crc != actual_crc) {
    char detail[64];
    std::snprintf(detail, sizeof(detail), " (stored %08x, computed %08x)", stored_crc, actual_crc);
    return Status::Error(EUCLEAN,
                         std::string(device_name) + ": superblock checksum mismatch" + detail);
  }
  Superblock sb;
  sb.format_version = DecodeFixed32(p + kVersionOffset);
  if (sb.format_version != kFormatVersion) {
    return Invalid(device_name,
                   "unsupported format version " + std::to_string(sb.format_version) +
                       " (this kvfs reads version " + std::to_string(kFormatVersion) + ")");
  }
  sb.block_size = DecodeFixed32(p + kBlockSizeOffset);
  std::memcpy(sb.volume_uuid.bytes.data(), p + kVolumeUuidOffset, 16);
  std::memcpy(sb.index_uuid.bytes.data(), p + kIndexUuidOffset, 16);
  sb.device_index = DecodeFixed32(p + kDeviceIndexOffset);
  sb.device_count = DecodeFixed32(p + kDeviceCountOffset);
  sb.data_start = DecodeFixed64(p + kDataStartOffset);
  sb.data_length = DecodeFixed64(p + kDataLengthOffset);

  if (sb.block_size != kBlockSize) {
    return Invalid(device_name, "unsupported block size " + std::to_string(sb.block_size) +
                                    " (expected " + std::to_string(kBlockSize) + ")");
  }
  if (sb.device_count == 0 || sb.device_index >= sb.device_count) {
    return Invalid(device_name, "bad device index " + std::to_string(sb.device_index) + " of " +
                                    std::to_string(sb.device_count));
  }
  if (sb.data_start < kSuperblockSize || sb.data_start % kBlockSize != 0 ||
      sb.data_length == 0 || sb.data_length % kBlockSize != 0 ||
      sb.data_start + sb.data_length < sb.data_start) {
    return Invalid(device_name, "bad data region (start " + std::to_string(sb.data_start) +
                                    ", length " + std::to_string(sb.data_length) + ")");
  }
  return sb;
}

}  // namespace kvfs::device
