// verify=on (FileSystemOptions::verify_reads): reads check each extent's
// crc32c and fail with EIO on a mismatch, whichever way the read is served.
#include <fcntl.h>

#include <cstdlib>
#include <random>

#include "common/format.h"
#include "device/block_device.h"
#include "fs/fs_fixture.h"
#include "util/flip_byte.h"
#include "index/index.h"

namespace kvfs::fs {
namespace {

// How reads reach the device: prefetched whole chunks, chunks loaded into
// the cache on demand, or (no cache room) extents read into the reply.
enum class Path { kPrefetch, kCacheFill, kDirect };

std::string PathName(const ::testing::TestParamInfo<Path>& p) {
  switch (p.param) {
    case Path::kPrefetch: return "Prefetch";
    case Path::kCacheFill: return "CacheFill";
    case Path::kDirect: return "Direct";
  }
  return "?";
}

class ReadVerifyTest : public FsTest, public ::testing::WithParamInterface<Path> {
 protected:
  FileSystemOptions FsOpts() override {
    FileSystemOptions o;
    o.verify_reads = verify_;
    o.prefetch = GetParam() == Path::kPrefetch ? PrefetchMode::kOpen : PrefetchMode::kOff;
    o.cache_bytes = GetParam() == Path::kDirect ? 0 : 64 << 20;
    return o;
  }

  // The extents of `ino` as the index has them. REQUIRES: unmounted.
  std::vector<index::FileExtent> ExtentsOf(uint64_t ino) {
    auto idx = index::Index::Open(img_ + ".index", index::Index::Options{});
    EXPECT_TRUE(idx.ok()) << idx.status().ToString();
    if (!idx.ok()) return {};
    auto rec = (*idx)->GetInode(ino);
    EXPECT_TRUE(rec.ok()) << rec.status().ToString();
    return rec.ok() ? rec->extents : std::vector<index::FileExtent>{};
  }

  // Flips one byte of the image. REQUIRES: unmounted.
  void FlipByte(uint64_t byte_off) { kvfs::testing::FlipByte(img_, byte_off); }

  Result<std::string> ReadAt(uint64_t ino, uint64_t off, size_t len) {
    KVFS_ASSIGN_OR_RETURN(uint64_t fh, fs_->Open(ino, O_RDONLY));
    auto r = ReadFh(fh, off, len);
    fs_->Release(fh);
    return r;
  }

  bool verify_ = true;
};

TEST_P(ReadVerifyTest, DamagedExtentFailsEveryReadOfItWithEioAndNothingElse) {
  const std::string data = Pattern((3 << 20) + 1000, 7);
  const std::string other = Pattern(2 << 20, 8);
  const uint64_t ino = Store(kRootIno, "x", data);
  const uint64_t other_ino = Store(kRootIno, "y", other);
  Unmount();
  std::vector<index::FileExtent> ext = ExtentsOf(ino);
  ASSERT_EQ(ext.size(), 4u);
  ASSERT_EQ(ext[1].file_off, 1u << 20);
  FlipByte(ext[1].ext.byte_off + 5000);

  verify_ = false;  // the damage is real: without verify, wrong bytes
  Mount();
  auto plain = ReadAt(ino, 0, data.size());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_NE(*plain, data);
  Unmount();

  verify_ = true;
  Mount();
  EXPECT_EQ(ReadAt(ino, 0, data.size()).status().code(), EIO);
  // 4 KiB far from the flipped byte, in the same extent: checked whole.
  EXPECT_EQ(ReadAt(ino, (1 << 20) + (512 << 10), 4096).status().code(), EIO);
  EXPECT_EQ(ReadAt(ino, (2 << 20) - 10, 20).status().code(), EIO);  // straddles two extents
  auto head = ReadAt(ino, 0, 1 << 20);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  EXPECT_EQ(*head, data.substr(0, 1 << 20));
  auto tail = ReadAt(ino, 2 << 20, 2 << 20);
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  EXPECT_EQ(*tail, data.substr(2 << 20));
  auto y = ReadAt(other_ino, 0, other.size());
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(*y, other);
  EXPECT_EQ(ReadAt(ino, 0, data.size()).status().code(), EIO);  // and it stays so
}

TEST_P(ReadVerifyTest, ReadsAtAnyOffsetAndLengthReturnExactlyTheBytes) {
  const std::string data = Pattern((5 << 20) + 12345, 9);
  const uint64_t ino = Store(kRootIno, "x", data);
  Remount();  // from the device, not from staging
  std::mt19937_64 rng(42);
  for (int k = 0; k < 60; ++k) {
    uint64_t off = rng() % data.size();
    size_t len = 1 + rng() % (3 << 20);
    if (k % 4 == 0) off = AlignDown(off, kBlockSize);
    if (k % 8 == 0) len = AlignUp(len, kBlockSize);
    auto r = ReadAt(ino, off, len);
    ASSERT_TRUE(r.ok()) << off << "+" << len << ": " << r.status().ToString();
    ASSERT_EQ(*r, data.substr(off, len)) << off << "+" << len;
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, ReadVerifyTest,
                         ::testing::Values(Path::kPrefetch, Path::kCacheFill, Path::kDirect),
                         PathName);

}  // namespace
}  // namespace kvfs::fs
