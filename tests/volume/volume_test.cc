#include "volume/volume.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/format.h"
#include "util/temp_dir.h"
#include "volume/format_volume.h"

namespace kvfs::volume {
namespace {

constexpr uint64_t kImageBytes = 64 << 20;

VolumeOptions SmallOptions() {
  VolumeOptions o;
  o.engine.rings = 2;
  o.engine.staging_pool_bytes = 8 << 20;
  return o;
}

class VolumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    img_ = dir_.Join("vol.img");
    FormatOptions opt;
    opt.size_bytes = kImageBytes;
    auto r = FormatVolume({img_}, opt);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  testing::TempDir dir_;
  std::string img_;
};

TEST_F(VolumeTest, OpensFreshVolumeWithAllSpaceFree) {
  auto v = Volume::Open({img_}, SmallOptions());
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  SpaceStats s = (*v)->space();
  EXPECT_EQ(s.total_bytes, kImageBytes - kDataStart);
  EXPECT_EQ(s.free_bytes, s.total_bytes);
  EXPECT_EQ(s.largest_free, s.total_bytes);
  auto root = (*v)->index().GetInode(kRootIno);
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE((root->mode & S_IFMT) == S_IFDIR);
}

TEST_F(VolumeTest, EachDeviceReportsItsRegionAndWhatOfItIsAllocated) {
  // Two devices of different sizes: the per-device rows sum to the volume's
  // figures and follow what is allocated on each.
  const std::string a = dir_.Join("a.img"), b = dir_.Join("b.img");
  std::ofstream(a).close();
  std::ofstream(b).close();
  std::filesystem::resize_file(a, kImageBytes);
  std::filesystem::resize_file(b, 2 * kImageBytes);
  ASSERT_TRUE(FormatVolume({a, b}, FormatOptions{}).ok());
  auto v = Volume::Open({a, b}, SmallOptions());
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  SpaceStats s = (*v)->space();
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_EQ(s.devices[0].total_bytes, kImageBytes - kDataStart);
  EXPECT_EQ(s.devices[1].total_bytes, 2 * kImageBytes - kDataStart);
  EXPECT_EQ(s.devices[0].free_bytes, s.devices[0].total_bytes);
  EXPECT_EQ(s.devices[1].free_bytes, s.devices[1].total_bytes);
  EXPECT_EQ(s.total_bytes, s.devices[0].total_bytes + s.devices[1].total_bytes);

  auto got = (*v)->Allocate(24 << 20);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  uint64_t on[2] = {0, 0};
  for (const Extent& e : *got) on[e.device] += e.len;
  s = (*v)->space();
  for (size_t d = 0; d < 2; ++d) {
    EXPECT_EQ(s.devices[d].total_bytes - s.devices[d].free_bytes, on[d]) << d;
    EXPECT_LE(s.devices[d].largest_free, s.devices[d].free_bytes) << d;
  }
  EXPECT_EQ(s.free_bytes, s.devices[0].free_bytes + s.devices[1].free_bytes);
  EXPECT_EQ(s.total_bytes - s.free_bytes, uint64_t{24} << 20);
  EXPECT_EQ(s.largest_free, std::max(s.devices[0].largest_free, s.devices[1].largest_free));
  ASSERT_TRUE((*v)->Free(*got).ok());
  EXPECT_EQ((*v)->space().devices[1].free_bytes, s.devices[1].total_bytes);
}

TEST_F(VolumeTest, SecondReadWriteOpenIsRefusedWhileOpen) {
  auto v = Volume::Open({img_}, SmallOptions());
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  auto again = Volume::Open({img_}, SmallOptions());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), EBUSY) << again.status().ToString();
  VolumeOptions ro = SmallOptions();
  ro.read_only = true;
  auto reader = Volume::Open({img_}, ro);
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
}

TEST_F(VolumeTest, RefusesForeignIndex) {
  std::string other = dir_.Join("other.img");
  FormatOptions opt;
  opt.size_bytes = kImageBytes;
  ASSERT_TRUE(FormatVolume({other}, opt).ok());
  VolumeOptions o = SmallOptions();
  o.index_dir = other + ".index";
  auto v = Volume::Open({img_}, o);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), EINVAL);
  EXPECT_NE(v.status().context().find("foreign index"), std::string::npos)
      << v.status().ToString();
}

TEST_F(VolumeTest, RefusesMissingIndex) {
  std::filesystem::remove_all(img_ + ".index");
  auto v = Volume::Open({img_}, SmallOptions());
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), ENOENT) << v.status().ToString();
  EXPECT_NE(v.status().context().find(img_ + ".index"), std::string::npos);
}

TEST_F(VolumeTest, RefusesDeviceThatIsNotKvfs) {
  std::string junk = dir_.Join("junk.img");
  std::filesystem::copy_file(img_, junk);
  {
    auto dev = device::BlockDevice::Open(junk, false);
    ASSERT_TRUE(dev.ok());
    alignas(4096) static char zeros[4096] = {};
    ASSERT_TRUE((*dev)->WriteAt(0, zeros, sizeof(zeros)).ok());
  }
  VolumeOptions o = SmallOptions();
  o.index_dir = img_ + ".index";
  auto v = Volume::Open({junk}, o);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().context().find(junk), std::string::npos) << v.status().ToString();
}

TEST_F(VolumeTest, FreeSpaceIsRegionMinusIndexedExtentsAndOrphansAreReclaimed) {
  Extent kept, orphaned;
  {
    auto v = Volume::Open({img_}, SmallOptions());
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    auto a = (*v)->Allocate(3 << 20);
    auto b = (*v)->Allocate(1 << 20);
    auto c = (*v)->Allocate(2 << 20);  // allocated, never indexed: free after reopen
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    kept = (*a)[0];
    orphaned = (*b)[0];
    index::Index& idx = (*v)->index();
    index::Inode f1;
    f1.ino = idx.AllocateIno();
    f1.mode = S_IFREG | 0644;
    f1.nlink = 1;
    f1.size = 3 << 20;
    f1.extents.push_back({0, kept, 0});
    index::Inode f2 = f1;
    f2.ino = idx.AllocateIno();
    f2.nlink = 0;
    f2.size = 1 << 20;
    f2.extents = {{0, orphaned, 0}};
    index::WriteBatch batch = idx.NewBatch();
    batch.PutInode(f1);
    batch.PutEntry(kRootIno, "kept", f1.ino);
    batch.PutInode(f2);
    batch.PutOrphan(f2.ino);
    ASSERT_TRUE(idx.Commit(batch, true).ok());
  }
  auto v = Volume::Open({img_}, SmallOptions());
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ((*v)->reclaimed_orphans(), 1u);
  SpaceStats s = (*v)->space();
  EXPECT_EQ(s.free_bytes, s.total_bytes - kept.len);
  // The kept extent is not free: allocating everything never returns it.
  auto rest = (*v)->Allocate(s.free_bytes);
  ASSERT_TRUE(rest.ok()) << rest.status().ToString();
  for (const Extent& e : *rest) {
    EXPECT_TRUE(e.end() <= kept.byte_off || e.byte_off >= kept.end());
  }
  EXPECT_EQ((*v)->Allocate(4096).status().code(), ENOSPC);
  ASSERT_TRUE((*v)->Free(*rest).ok());
  EXPECT_FALSE((*v)->Free(*rest).ok());  // double free is reported
}

}  // namespace
}  // namespace kvfs::volume
