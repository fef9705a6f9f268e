#include "volume/format_volume.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/format.h"
#include "device/block_device.h"
#include "util/temp_dir.h"

namespace kvfs::volume {
namespace {

constexpr uint64_t kImageBytes = 64 << 20;

// The first `n` bytes of `path`, to prove a refusal wrote nothing.
std::string Head(const std::string& path, size_t n) {
  std::ifstream f(path, std::ios::binary);
  std::string s(n, '\0');
  f.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<size_t>(f.gcount()));
  return s;
}

// A freshly formatted image `dir`/vol.img of kImageBytes; `opt` as used.
std::string FormattedImage(const testing::TempDir& dir, FormatOptions* opt) {
  std::string img = dir.Join("vol.img");
  opt->size_bytes = kImageBytes;
  auto r = FormatVolume({img}, *opt);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return img;
}

TEST(FormatVolume, CreatesImageSuperblockAndIndex) {
  testing::TempDir dir;
  std::string img = dir.Join("vol.img");
  FormatOptions opt;
  opt.size_bytes = kImageBytes;
  auto r = FormatVolume({img}, opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->index_dir, img + ".index");
  EXPECT_EQ(r->data_bytes, kImageBytes - kDataStart);
  EXPECT_EQ(std::filesystem::file_size(img), kImageBytes);
  auto dev = device::BlockDevice::Open(img, true);
  ASSERT_TRUE(dev.ok());
  auto sb = (*dev)->ReadSuperblock();
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_EQ(sb->volume_uuid, r->volume_uuid);
  EXPECT_EQ(sb->index_uuid, r->index_uuid);
  EXPECT_EQ(sb->device_count, 1u);
  EXPECT_EQ(sb->data_start, kDataStart);
}

TEST(FormatVolume, RefusesExistingVolumeWithoutForceAndWritesNothing) {
  testing::TempDir dir;
  FormatOptions opt;
  std::string img = FormattedImage(dir, &opt);
  ASSERT_FALSE(::testing::Test::HasFailure());
  std::string before = Head(img, 4096);
  auto again = FormatVolume({img}, opt);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), EEXIST);
  EXPECT_NE(again.status().context().find("already holds kvfs volume"), std::string::npos);
  EXPECT_EQ(Head(img, 4096), before);

  opt.force = true;
  auto forced = FormatVolume({img}, opt);
  ASSERT_TRUE(forced.ok()) << forced.status().ToString();
  EXPECT_NE(Head(img, 4096), before);
}

// A volume in use (mounted, or being checked) holds its devices' lock:
// --force does not override that, and nothing is written, index included.
TEST(FormatVolume, RefusesAVolumeInUseEvenWithForceAndWritesNothing) {
  testing::TempDir dir;
  FormatOptions opt;
  std::string img = FormattedImage(dir, &opt);
  ASSERT_FALSE(::testing::Test::HasFailure());
  std::string before = Head(img, 4096);
  std::string current = Head(img + ".index/CURRENT", 100);
  ASSERT_FALSE(current.empty());
  auto holder = device::BlockDevice::Open(img, /*read_only=*/true);
  ASSERT_TRUE(holder.ok());
  ASSERT_TRUE((*holder)->LockShared().ok());  // as fsck holds it; a mount holds it exclusively
  opt.force = true;
  auto r = FormatVolume({img}, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EBUSY) << r.status().ToString();
  EXPECT_NE(r.status().context().find("in use"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(Head(img, 4096), before);
  EXPECT_EQ(Head(img + ".index/CURRENT", 100), current);
  holder->reset();  // released: now it may be formatted
  EXPECT_TRUE(FormatVolume({img}, opt).ok());
}

TEST(FormatVolume, RefusesADeviceNamedTwice) {
  testing::TempDir dir;
  std::string img = dir.Join("vol.img");
  FormatOptions opt;
  opt.size_bytes = kImageBytes;
  auto r = FormatVolume({img, dir.Join("./vol.img")}, opt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_NE(r.status().context().find("named twice"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(img));
  EXPECT_FALSE(std::filesystem::exists(img + ".index"));
}

TEST(FormatVolume, RefusesForeignFilesystemSignature) {
  testing::TempDir dir;
  std::string img = dir.Join("ext4.img");
  {
    int fd = open(img.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, kImageBytes), 0);
    close(fd);
  }
  std::string cmd = "mkfs.ext4 -q -F " + img + " >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "mkfs.ext4 not available";
  std::string before = Head(img, 1 << 16);
  auto r = FormatVolume({img}, FormatOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EEXIST);
  EXPECT_NE(r.status().context().find("ext4"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(Head(img, 1 << 16), before);
  EXPECT_FALSE(std::filesystem::exists(img + ".index"));
}

TEST(FormatVolume, RefusesBadInputWithOneClearError) {
  testing::TempDir dir;
  // Missing device without --size.
  auto r = FormatVolume({dir.Join("missing.img")}, FormatOptions{});
  EXPECT_EQ(r.status().code(), ENOENT);
  EXPECT_FALSE(std::filesystem::exists(dir.Join("missing.img")));
  // Size not a multiple of 4 KiB.
  FormatOptions odd;
  odd.size_bytes = kImageBytes + 1;
  r = FormatVolume({dir.Join("odd.img")}, odd);
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_FALSE(std::filesystem::exists(dir.Join("odd.img")));
  // Too small.
  FormatOptions small;
  small.size_bytes = kMinDeviceBytes - kBlockSize;
  r = FormatVolume({dir.Join("small.img")}, small);
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_NE(r.status().context().find("too small"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.Join("small.img")));
  // Index directory that is not empty and not an index.
  std::filesystem::create_directories(dir.Join("junk"));
  std::ofstream(dir.Join("junk/file")) << "x";
  FormatOptions junk;
  junk.size_bytes = kImageBytes;
  junk.index_dir = dir.Join("junk");
  r = FormatVolume({dir.Join("j.img")}, junk);
  EXPECT_EQ(r.status().code(), ENOTEMPTY);
  EXPECT_FALSE(std::filesystem::exists(dir.Join("j.img")));
  // Index directory under a read-only place.
  FormatOptions ro;
  ro.size_bytes = kImageBytes;
  ro.index_dir = "/proc/kvfs-index";
  r = FormatVolume({dir.Join("ro.img")}, ro);
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(std::filesystem::exists(dir.Join("ro.img")));
}

TEST(FormatVolume, FormatsSeveralDevices) {
  testing::TempDir dir;
  FormatOptions opt;
  opt.size_bytes = kImageBytes;
  auto r = FormatVolume({dir.Join("a.img"), dir.Join("b.img")}, opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->data_bytes, 2 * (kImageBytes - kDataStart));
  auto b = device::BlockDevice::Open(dir.Join("b.img"), true);
  ASSERT_TRUE(b.ok());
  auto sb = (*b)->ReadSuperblock();
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ(sb->device_index, 1u);
  EXPECT_EQ(sb->device_count, 2u);
}

}  // namespace
}  // namespace kvfs::volume
