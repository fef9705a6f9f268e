// A reader moving through a file too large to load whole finds the next
// chunks loading (or loaded) ahead of it; a reader that jumps around does
// not make kvfs read what it will not ask for.
#include <fcntl.h>

#include "common/format.h"
#include "fs/stats.h"
#include "fs_fixture.h"

namespace kvfs::fs {
namespace {

class ReadAheadTest : public FsTest {
 protected:
  FileSystemOptions FsOpts() override {
    FileSystemOptions o;
    o.prefetch_file_max_bytes = 2 << 20;  // larger files are read, not loaded whole
    return o;
  }
  uint64_t Prefetched() { return fs_->Stats().cache.prefetched_bytes; }
};

TEST_F(ReadAheadTest, AHeaderReadThenTheRestFindsTheChunksLoadedAhead) {
  const uint64_t size = 12 << 20;
  const std::string data = Pattern(size, 7);
  const uint64_t ino = Store(kRootIno, "object", data);
  ASSERT_TRUE(fs_->Sync().ok());
  ASSERT_TRUE(fs_->DropCache().ok());
  auto fh = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  const uint64_t before = Prefetched();
  auto head = ReadFh(*fh, 0, 4096);
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(*head, data.substr(0, 4096));
  // The window (16 MiB) covers the rest of the file.
  EXPECT_GE(Prefetched() - before, size - (1 << 20));
  const uint64_t hits = fs_->Stats().cache.hits;
  for (uint64_t off = 4096; off < size; off += 1 << 20) {
    auto r = ReadFh(*fh, off, 1 << 20);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(*r, data.substr(off, 1 << 20)) << off;
  }
  EXPECT_GE(fs_->Stats().cache.hits - hits, 11u);
  fs_->Release(*fh);
}

TEST_F(ReadAheadTest, ReadsThatJumpAroundReadNothingAhead) {
  const uint64_t size = 12 << 20;
  const std::string data = Pattern(size, 8);
  const uint64_t ino = Store(kRootIno, "object", data);
  ASSERT_TRUE(fs_->Sync().ok());
  ASSERT_TRUE(fs_->DropCache().ok());
  auto fh = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  const uint64_t before = Prefetched();
  for (uint64_t off : {5ull << 20, 1ull << 20, 9ull << 20, 3ull << 20}) {
    auto r = ReadFh(*fh, off + 100, 1000);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, data.substr(off + 100, 1000));
  }
  EXPECT_EQ(Prefetched(), before);
  fs_->Release(*fh);
}

}  // namespace
}  // namespace kvfs::fs
