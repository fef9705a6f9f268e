#include "device/superblock.h"

#include <gtest/gtest.h>

#include "common/crc32c.h"
#include "common/endian.h"
#include "common/format.h"

namespace kvfs::device {
namespace {

Superblock Sample() {
  Superblock sb;
  sb.format_version = kFormatVersion;
  sb.volume_uuid = Uuid::Random();
  sb.index_uuid = Uuid::Random();
  sb.device_index = 1;
  sb.device_count = 3;
  sb.block_size = kBlockSize;
  sb.data_start = kDataStart;
  sb.data_length = 64ull << 30;
  return sb;
}

// Rewrites the checksum so that only the field under test is wrong.
void Reseal(std::string* block) {
  EncodeFixed32(block->data() + kSuperblockSize - 4, Crc32c(block->data(), kSuperblockSize - 4));
}

TEST(Superblock, EncodeDecodeRoundTrips) {
  Superblock sb = Sample();
  std::string block = sb.Encode();
  ASSERT_EQ(block.size(), kSuperblockSize);
  auto back = Superblock::Decode(block, "/dev/test");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, sb);
}

TEST(Superblock, LayoutIsLittleEndianWithTrailingCrc) {
  std::string block = Sample().Encode();
  EXPECT_EQ(block.substr(0, 8), "KVFSSB01");
  EXPECT_EQ(DecodeFixed32(block.data() + 8), kFormatVersion);
  EXPECT_EQ(DecodeFixed32(block.data() + kSuperblockSize - 4),
            Crc32c(block.data(), kSuperblockSize - 4));
}

TEST(Superblock, FlippedBitIsChecksumMismatchNamingDevice) {
  std::string block = Sample().Encode();
  block[100] ^= 0x01;  // in the zero padding: only the crc can notice
  auto r = Superblock::Decode(block, "/dev/nvme9n1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EUCLEAN);
  EXPECT_NE(r.status().context().find("/dev/nvme9n1"), std::string::npos);
  EXPECT_NE(r.status().context().find("checksum mismatch"), std::string::npos);
}

TEST(Superblock, CorruptStoredCrcIsDetected) {
  std::string block = Sample().Encode();
  block[kSuperblockSize - 1] ^= 0x40;
  EXPECT_EQ(Superblock::Decode(block, "img").status().code(), EUCLEAN);
}

TEST(Superblock, BadMagicIsNotAKvfsDevice) {
  std::string block = Sample().Encode();
  block[0] = 'X';
  Reseal(&block);
  auto r = Superblock::Decode(block, "/var/tmp/img");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_EQ(r.status().context(), "/var/tmp/img: not a kvfs device (bad magic)");
}

TEST(Superblock, ZeroedBlockIsNotAKvfsDevice) {
  auto r = Superblock::Decode(std::string(kSuperblockSize, '\0'), "img");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_NE(r.status().context().find("bad magic"), std::string::npos);
}

TEST(Superblock, UnknownVersionIsRejected) {
  Superblock sb = Sample();
  sb.format_version = 99;
  auto r = Superblock::Decode(sb.Encode(), "img");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_NE(r.status().context().find("img: unsupported format version 99"), std::string::npos);
}

TEST(Superblock, WrongBlockSizeIsRejected) {
  Superblock sb = Sample();
  sb.block_size = 512;
  auto r = Superblock::Decode(sb.Encode(), "img");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_NE(r.status().context().find("block size 512"), std::string::npos);
}

TEST(Superblock, InsaneDataRegionIsRejected) {
  for (auto mutate : std::initializer_list<void (*)(Superblock*)>{
           [](Superblock* s) { s->data_start = 0; },             // over the superblock
           [](Superblock* s) { s->data_start = kDataStart + 1; },  // unaligned
           [](Superblock* s) { s->data_length = 0; },
           [](Superblock* s) { s->data_length = ~0ull - 4095; },  // wraps around
           [](Superblock* s) { s->device_index = 3; },            // == count
           [](Superblock* s) { s->device_count = 0; }}) {
    Superblock sb = Sample();
    mutate(&sb);
    EXPECT_EQ(Superblock::Decode(sb.Encode(), "img").status().code(), EINVAL);
  }
}

TEST(Superblock, WrongSizedBlockIsRejected) {
  std::string block = Sample().Encode();
  EXPECT_EQ(Superblock::Decode(block.substr(0, 512), "img").status().code(), EINVAL);
}

}  // namespace
}  // namespace kvfs::device
