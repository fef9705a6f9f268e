#include "device/block_device.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

#include "common/format.h"
#include "temp_image.h"

namespace kvfs::device {
namespace {

using testing::Aligned;
using testing::FillPattern;
using testing::MakeImage;
using testing::TempDir;

TEST(BlockDevice, MissingFileIsENOENT) {
  TempDir dir;
  auto r = BlockDevice::Open(dir.Join("nope"), false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ENOENT);
  EXPECT_NE(r.status().context().find("nope"), std::string::npos);
}

TEST(BlockDevice, DirectoryIsEINVAL) {
  TempDir dir;
  for (bool ro : {false, true}) {
    auto r = BlockDevice::Open(dir.path(), ro);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), EINVAL);
  }
}

TEST(BlockDevice, FifoIsEINVAL) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.Join("fifo").c_str(), 0600), 0);
  EXPECT_EQ(BlockDevice::Open(dir.Join("fifo"), false).status().code(), EINVAL);
}

TEST(BlockDevice, SizeNotBlockMultipleIsEINVAL) {
  TempDir dir;
  MakeImage(dir.Join("img"), 8192 + 512);
  EXPECT_EQ(BlockDevice::Open(dir.Join("img"), false).status().code(), EINVAL);
}

TEST(BlockDevice, OpensRegularFileWithItsSize) {
  TempDir dir;
  MakeImage(dir.Join("img"), 4 << 20);
  auto r = BlockDevice::Open(dir.Join("img"), false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->size_bytes(), 4u << 20);
  EXPECT_FALSE((*r)->is_block_device());
  EXPECT_FALSE((*r)->read_only());
  EXPECT_EQ((*r)->path(), dir.Join("img"));
}

TEST(BlockDevice, SecondExclusiveLockIsEBUSYUntilFirstCloses) {
  TempDir dir;
  MakeImage(dir.Join("img"), 1 << 20);
  auto a = BlockDevice::Open(dir.Join("img"), false);
  auto b = BlockDevice::Open(dir.Join("img"), false);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->LockExclusive().ok());
  Status st = (*b)->LockExclusive();
  EXPECT_EQ(st.code(), EBUSY);
  EXPECT_NE(st.context().find("in use"), std::string::npos);
  EXPECT_EQ((*b)->LockShared().code(), EBUSY);
  a->reset();  // closing the fd releases the lock
  EXPECT_TRUE((*b)->LockExclusive().ok());
}

TEST(BlockDevice, SharedLocksCoexistButExcludeExclusive) {
  TempDir dir;
  MakeImage(dir.Join("img"), 1 << 20);
  auto a = BlockDevice::Open(dir.Join("img"), true);
  auto b = BlockDevice::Open(dir.Join("img"), true);
  auto c = BlockDevice::Open(dir.Join("img"), false);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_TRUE((*a)->LockShared().ok());
  EXPECT_TRUE((*b)->LockShared().ok());
  EXPECT_EQ((*c)->LockExclusive().code(), EBUSY);
}

TEST(BlockDevice, WriteAtReadAtRoundTrip) {
  TempDir dir;
  MakeImage(dir.Join("img"), 1 << 20);
  auto dev = BlockDevice::Open(dir.Join("img"), false);
  ASSERT_TRUE(dev.ok());
  auto w = Aligned(64 << 10), r = Aligned(64 << 10);
  FillPattern(w.get(), 64 << 10, 7);
  ASSERT_TRUE((*dev)->WriteAt(128 << 10, w.get(), 64 << 10).ok());
  ASSERT_TRUE((*dev)->Sync().ok());
  ASSERT_TRUE((*dev)->ReadAt(128 << 10, r.get(), 64 << 10).ok());
  EXPECT_EQ(std::memcmp(w.get(), r.get(), 64 << 10), 0);
}

TEST(BlockDevice, UnalignedOrPastEndIsAnError) {
  TempDir dir;
  MakeImage(dir.Join("img"), 1 << 20);
  auto dev = BlockDevice::Open(dir.Join("img"), false);
  ASSERT_TRUE(dev.ok());
  auto b = Aligned(8192);
  EXPECT_EQ((*dev)->ReadAt(512, b.get(), 4096).code(), EINVAL);
  EXPECT_EQ((*dev)->ReadAt(0, b.get() + 512, 4096).code(), EINVAL);
  EXPECT_EQ((*dev)->WriteAt(0, b.get(), 100).code(), EINVAL);
  EXPECT_EQ((*dev)->ReadAt((1 << 20) - 4096, b.get(), 8192).code(), EIO);
}

TEST(BlockDevice, ReadOnlyRefusesWrites) {
  TempDir dir;
  MakeImage(dir.Join("img"), 1 << 20);
  auto dev = BlockDevice::Open(dir.Join("img"), true);
  ASSERT_TRUE(dev.ok());
  auto b = Aligned(4096);
  EXPECT_EQ((*dev)->WriteAt(0, b.get(), 4096).code(), EROFS);
  EXPECT_TRUE((*dev)->ReadAt(0, b.get(), 4096).ok());
}

TEST(BlockDevice, SuperblockRoundTripsThroughTheDevice) {
  TempDir dir;
  MakeImage(dir.Join("img"), kMinDeviceBytes);
  auto dev = BlockDevice::Open(dir.Join("img"), false);
  ASSERT_TRUE(dev.ok());
  Superblock sb;
  sb.format_version = kFormatVersion;
  sb.volume_uuid = Uuid::Random();
  sb.index_uuid = Uuid::Random();
  sb.device_count = 1;
  sb.block_size = kBlockSize;
  sb.data_start = kDataStart;
  sb.data_length = kMinDeviceBytes - kDataStart;
  ASSERT_TRUE((*dev)->WriteSuperblock(sb).ok());
  dev->reset();
  auto again = BlockDevice::Open(dir.Join("img"), true);
  ASSERT_TRUE(again.ok());
  auto read = (*again)->ReadSuperblock();
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, sb);
}

TEST(BlockDevice, FreshImageHasNoSuperblock) {
  TempDir dir;
  MakeImage(dir.Join("img"), 1 << 20);
  auto dev = BlockDevice::Open(dir.Join("img"), true);
  ASSERT_TRUE(dev.ok());
  auto r = (*dev)->ReadSuperblock();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_NE(r.status().context().find(dir.Join("img") + ": not a kvfs device"),
            std::string::npos);
}

TEST(BlockDevice, DataRegionPastDeviceEndIsRejected) {
  TempDir dir;
  MakeImage(dir.Join("img"), kMinDeviceBytes);
  auto dev = BlockDevice::Open(dir.Join("img"), false);
  ASSERT_TRUE(dev.ok());
  Superblock sb;
  sb.format_version = kFormatVersion;
  sb.device_count = 1;
  sb.block_size = kBlockSize;
  sb.data_start = kDataStart;
  sb.data_length = kMinDeviceBytes;  // start + length > size
  ASSERT_TRUE((*dev)->WriteSuperblock(sb).ok());
  auto r = (*dev)->ReadSuperblock();
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_NE(r.status().context().find("past the end"), std::string::npos);
}

}  // namespace
}  // namespace kvfs::device
