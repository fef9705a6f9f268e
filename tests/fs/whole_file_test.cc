// The batch ioctl's whole-file calls (FileSystem::LookupPath, ReadFile,
// WriteFile, DeleteFile, PrefetchFile) on a real image file and index:
// path syntax, permission checks, byte-exact round trips, the zero-copy
// path, replace semantics and space exhaustion.
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/format.h"
#include "fs/access.h"
#include "fs/fs_fixture.h"
#include "util/write_gate_io.h"
#include "fs/stats.h"

namespace kvfs::fs {
namespace {

const Caller kRoot{0, 0, 1, {}, {}};
const Caller kUser{1000, 1000, 2, {}, {}};

// A 4 KiB aligned buffer of `n` bytes (plus `slack` past them).
struct Aligned {
  explicit Aligned(size_t n, size_t slack = 0) : size(n) {
    const size_t cap = AlignUp(std::max<size_t>(n + slack, 1), kBlockSize);
    p = static_cast<char*>(std::aligned_alloc(kBlockSize, cap));
    std::memset(p, 0x5a, cap);
  }
  ~Aligned() { std::free(p); }
  std::span<char> span() { return {p, size}; }
  char* p;
  size_t size;
};

class WholeFileTest : public FsTest {
 protected:
  Result<size_t> ReadFile(std::string_view path, uint64_t off, std::span<char> dest,
                          const Caller& c = kRoot, uint64_t dir = kRootIno) {
    std::promise<Result<size_t>> p;
    fs_->ReadFile(dir, path, off, dest, c, [&](Result<size_t> r) { p.set_value(std::move(r)); });
    return p.get_future().get();
  }
  Status WriteFile(std::string_view path, std::span<const char> data, const Caller& c = kRoot,
                   uint64_t dir = kRootIno) {
    std::promise<Status> p;
    fs_->WriteFile(dir, path, data, c, [&](Status st) { p.set_value(std::move(st)); });
    return p.get_future().get();
  }
  // The whole file `path` through ReadFile into an aligned buffer.
  Result<std::string> ReadAll(std::string_view path, const Caller& c = kRoot) {
    KVFS_ASSIGN_OR_RETURN(Attr a, fs_->LookupPath(kRootIno, path, c));
    Aligned buf(a.size, kBlockSize);
    KVFS_ASSIGN_OR_RETURN(size_t n, ReadFile(path, 0, std::span<char>(buf.p, a.size + kBlockSize), c));
    return std::string(buf.p, n);
  }
  uint64_t Dir(const std::string& name, uint32_t mode, const Caller& owner = kRoot,
               uint64_t parent = kRootIno) {
    auto d = fs_->MkDir(parent, name, mode, owner);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? d->ino : 0;
  }
  void Chmod(uint64_t ino, uint32_t mode, std::optional<uint32_t> uid = {},
             std::optional<uint32_t> gid = {}) {
    SetAttrRequest req;
    req.mode = mode;
    req.uid = uid;
    req.gid = gid;
    ASSERT_TRUE(fs_->SetAttr(ino, req).ok());
  }
  uint64_t zero_copy() { return fs_->Stats().zero_copy_bytes; }
};

int Code(const Status& st) { return st.code(); }
template <typename T>
int Code(const Result<T>& r) { return r.ok() ? 0 : r.status().code(); }

// ------------------------------------------------------------ path syntax

TEST_F(WholeFileTest, PathsThatEscapeAreExdevAndMalformedOnesEinval) {
  uint64_t d = Dir("d", 0755);
  Store(d, "f", "x");
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "d/f", kRoot)), 0);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "..", kRoot)), EXDEV);
  EXPECT_EQ(Code(fs_->LookupPath(d, "../d/f", kRoot)), EXDEV);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "d/../d/f", kRoot)), EXDEV);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "/d/f", kRoot)), EXDEV);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "d//f", kRoot)), EINVAL);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "", kRoot)), EINVAL);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "d/", kRoot)), EINVAL);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "./d/f", kRoot)), EINVAL);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, std::string(256, 'a'), kRoot)), ENAMETOOLONG);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "d/" + std::string(256, 'a'), kRoot)), ENAMETOOLONG);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, std::string(255, 'a'), kRoot)), ENOENT);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "d/f/g", kRoot)), ENOTDIR);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "d/nope/g", kRoot)), ENOENT);
  // Relative to a directory other than the root, like openat(2).
  auto a = fs_->LookupPath(d, "f", kRoot);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size, 1u);
  // The same rules for every call.
  std::string data = "abc";
  Aligned buf(4096);
  EXPECT_EQ(Code(WriteFile("../x", data)), EXDEV);
  EXPECT_EQ(Code(WriteFile("a//x", data)), EINVAL);
  EXPECT_EQ(Code(WriteFile(std::string(256, 'w'), data)), ENAMETOOLONG);
  EXPECT_EQ(Code(WriteFile("d/f/x", data)), ENOTDIR);
  EXPECT_EQ(Code(ReadFile("/d/f", 0, buf.span())), EXDEV);
  EXPECT_EQ(Code(fs_->DeleteFile(kRootIno, "d/..", kRoot)), EXDEV);
  EXPECT_EQ(Code(fs_->PrefetchFile(kRootIno, "d//f", kRoot)), EINVAL);
  EXPECT_EQ(Code(fs_->ExistsPath(kRootIno, "d/../f", kRoot)), EXDEV);
}

TEST_F(WholeFileTest, ExistsAnswersForNamesOfAnyTypeWithStatsErrors) {
  uint64_t d = Dir("d", 0755);
  uint64_t locked = Dir("locked", 0700);
  Store(d, "f", "x");
  Store(locked, "g", "y");
  EXPECT_EQ(Code(fs_->ExistsPath(kRootIno, "d/f", kRoot)), 0);
  EXPECT_EQ(Code(fs_->ExistsPath(kRootIno, "d", kRoot)), 0);
  EXPECT_EQ(Code(fs_->ExistsPath(d, "f", kUser)), 0);
  EXPECT_EQ(Code(fs_->ExistsPath(kRootIno, "d/g", kRoot)), ENOENT);
  EXPECT_EQ(Code(fs_->ExistsPath(kRootIno, "nope/g", kRoot)), ENOENT);
  EXPECT_EQ(Code(fs_->ExistsPath(kRootIno, "d/f/g", kRoot)), ENOTDIR);
  EXPECT_EQ(Code(fs_->ExistsPath(kRootIno, "locked/g", kUser)), EACCES);
  EXPECT_EQ(Code(fs_->ExistsPath(kRootIno, "locked/g", kRoot)), 0);
  // A name removed, and one added, answer at once.
  ASSERT_TRUE(fs_->DeleteFile(kRootIno, "d/f", kRoot).ok());
  EXPECT_EQ(Code(fs_->ExistsPath(kRootIno, "d/f", kRoot)), ENOENT);
  Store(d, "h", "z");
  EXPECT_EQ(Code(fs_->ExistsPath(kRootIno, "d/h", kRoot)), 0);
}

// ExistsPaths walks a directory once for the names in it; every answer must
// still be the one a walk of that path alone gives, also for a hostile path
// that shares the text before its last '/' with the name before it.
TEST_F(WholeFileTest, ExistsOfManyPathsAnswersEachAsExistsOfItAlone) {
  uint64_t d = Dir("d", 0755);
  Dir("locked", 0700);
  Store(d, "f", "x");
  Store(kRootIno, "top", "y");
  const std::string long_leaf(256, 'n');
  const std::string long_path = "d/" + std::string(4095, 'p');
  std::string with_nul("d/a\0b", 5);
  const std::vector<std::string> paths = {
      "top", "/top", "top", "x", "..", ".", "", "d/f", "d/g", "d//f", "d/f", "d/..",
      "d/" + long_leaf, "d/f", long_path, "d/f", with_nul, "d/f", "d/", "nope/f", "d/f",
      "locked/g", "locked/h", "d/f/g", "d/f", "top/x", "top", std::string(255, 'm')};
  for (const Caller& who : {kRoot, kUser}) {
    std::vector<std::string_view> views(paths.begin(), paths.end());
    std::vector<int> codes(paths.size(), -1);
    fs_->ExistsPaths(kRootIno, views, who, codes);
    for (size_t i = 0; i < paths.size(); ++i) {
      EXPECT_EQ(codes[i], Code(fs_->ExistsPath(kRootIno, paths[i], who)))
          << "path " << i << " (" << paths[i].substr(0, 40) << ") as uid " << who.uid;
    }
    EXPECT_EQ(codes[0], 0);
    EXPECT_EQ(codes[1], EXDEV);
    EXPECT_EQ(codes[9], EINVAL);
    EXPECT_EQ(codes[12], ENAMETOOLONG);
    EXPECT_EQ(codes[14], ENAMETOOLONG);
    EXPECT_EQ(codes[16], EINVAL);
    EXPECT_EQ(codes[22], who.uid == 0 ? ENOENT : EACCES);
  }
}

// Names resolve through a cache of entries in front of the index: every
// answer cached before a change (missing, present, pointing at another
// inode) must give way to the change, before and after it commits, and the
// committed state must be what a fresh mount reads from the index.
TEST_F(WholeFileTest, NamesAnswerTheirLatestStateWhateverWasCachedBefore) {
  auto exists = [&](const char* path) { return Code(fs_->ExistsPath(kRootIno, path, kRoot)); };
  auto ino_of = [&](const char* name) -> uint64_t {
    auto a = fs_->Lookup(kRootIno, name);
    return a.ok() ? a->ino : 0;
  };
  for (int commit = 0; commit < 2; ++commit) {
    SCOPED_TRACE(commit ? "committed between changes" : "changes still pending");
    auto settle = [&] {
      if (commit) {
        ASSERT_TRUE(fs_->Sync().ok());
      }
    };
    const std::string a = "a" + std::to_string(commit), b = "b" + std::to_string(commit);
    EXPECT_EQ(exists(a.c_str()), ENOENT);  // cached as missing
    uint64_t ia = Store(kRootIno, a, "first");
    settle();
    EXPECT_EQ(exists(a.c_str()), 0);
    EXPECT_EQ(ino_of(a.c_str()), ia);
    EXPECT_EQ(exists(b.c_str()), ENOENT);
    uint64_t ib = Store(kRootIno, b, "second");
    ASSERT_TRUE(fs_->Rename(kRootIno, b, kRootIno, a, 0).ok());  // b over a
    settle();
    EXPECT_EQ(exists(b.c_str()), ENOENT);
    EXPECT_EQ(ino_of(a.c_str()), ib);
    ASSERT_TRUE(fs_->Unlink(kRootIno, a).ok());
    settle();
    EXPECT_EQ(exists(a.c_str()), ENOENT);
    EXPECT_EQ(fs_->Lookup(kRootIno, a).status().code(), ENOENT);
    uint64_t again = Store(kRootIno, a, "third");
    EXPECT_EQ(ino_of(a.c_str()), again);
  }
  Remount();  // nothing cached: the index answers
  EXPECT_EQ(exists("a0"), 0);
  EXPECT_EQ(exists("b0"), ENOENT);
  EXPECT_EQ(exists("a1"), 0);
  EXPECT_EQ(exists("b1"), ENOENT);
  auto r = Load(kRootIno, "a1");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "third");
}

// ------------------------------------------------------------ permissions

TEST_F(WholeFileTest, AccessFollowsOwnerGroupOtherAndRootBypass) {
  const uint32_t file = S_IFREG;
  const uint32_t dir = S_IFDIR;
  Caller grouped{1000, 1000, 0, {2000, 3000}, {}};
  EXPECT_TRUE(CheckAccess(file | 0600, 1000, 1, kUser, kMayRead | kMayWrite).ok());
  EXPECT_EQ(CheckAccess(file | 0060, 1000, 1000, kUser, kMayRead).code(), EACCES)
      << "the owner class decides even when the group class would allow";
  EXPECT_TRUE(CheckAccess(file | 0040, 0, 3000, grouped, kMayRead).ok());
  EXPECT_EQ(CheckAccess(file | 0040, 0, 3000, kUser, kMayRead).code(), EACCES);
  EXPECT_TRUE(CheckAccess(file | 0004, 0, 0, kUser, kMayRead).ok());
  EXPECT_EQ(CheckAccess(dir | 0700, 0, 0, kUser, kMayExec).code(), EACCES);
  EXPECT_TRUE(CheckAccess(dir | 0000, 5, 5, kRoot, kMayRead | kMayWrite | kMayExec).ok());
  EXPECT_TRUE(CheckAccess(file | 0000, 5, 5, kRoot, kMayRead | kMayWrite).ok());
  EXPECT_EQ(CheckAccess(file | 0666, 5, 5, kRoot, kMayExec).code(), EACCES);
  EXPECT_TRUE(CheckAccess(file | 0001, 5, 5, kRoot, kMayExec).ok());
  EXPECT_EQ(CheckSticky(dir | 01777, 0, 1001, kUser).code(), EPERM);
  EXPECT_TRUE(CheckSticky(dir | 01777, 0, 1000, kUser).ok());
  EXPECT_TRUE(CheckSticky(dir | 01777, 1000, 7, kUser).ok());
  EXPECT_TRUE(CheckSticky(dir | 01777, 0, 7, kRoot).ok());
  EXPECT_TRUE(CheckSticky(dir | 0777, 0, 7, kUser).ok());
}

TEST_F(WholeFileTest, ASearchlessDirectoryHidesItsFilesFromEveryCall) {
  uint64_t priv = Dir("priv", 0700);
  Store(priv, "f", "secret");
  Aligned buf(4096);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "priv/f", kUser)), EACCES);
  EXPECT_EQ(Code(ReadFile("priv/f", 0, buf.span(), kUser)), EACCES);
  EXPECT_EQ(Code(WriteFile("priv/g", std::string("x"), kUser)), EACCES);
  EXPECT_EQ(Code(fs_->DeleteFile(kRootIno, "priv/f", kUser)), EACCES);
  EXPECT_EQ(Code(fs_->PrefetchFile(kRootIno, "priv/f", kUser)), EACCES);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "priv/f", kRoot)), 0) << "root searches anything";
  // Group search permission through a supplementary group.
  Chmod(priv, 0710, 0, 2000);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "priv/f", kUser)), EACCES);
  Caller member{1000, 1000, 0, {2000}, {}};
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "priv/f", member)), 0);
  EXPECT_EQ(Load(priv, "f").value(), "secret") << "nothing was removed";
}

TEST_F(WholeFileTest, ReadNeedsReadPermissionOnTheFile) {
  uint64_t ino = Store(kRootIno, "f", "hello");
  Chmod(ino, 0600);
  Aligned buf(4096);
  EXPECT_EQ(Code(ReadFile("f", 0, buf.span(), kUser)), EACCES);
  EXPECT_EQ(Code(fs_->PrefetchFile(kRootIno, "f", kUser)), EACCES);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "f", kUser)), 0) << "stat needs no permission on the file";
  Chmod(ino, 0640, 0, 2000);
  Caller member{1000, 1000, 0, {2000}, {}};
  auto r = ReadFile("f", 0, buf.span(), member);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::string(buf.p, *r), "hello");
  Chmod(ino, 0000);
  r = ReadFile("f", 0, buf.span(), kRoot);
  ASSERT_TRUE(r.ok()) << "root reads a mode-0 file";
  EXPECT_EQ(*r, 5u);
}

TEST_F(WholeFileTest, DeleteAndReplaceNeedWriteOnTheDirectoryAndObeyTheStickyBit) {
  uint64_t pub = Dir("pub", 0755);
  Store(pub, "f", "root's");
  EXPECT_EQ(Code(fs_->DeleteFile(kRootIno, "pub/f", kUser)), EACCES);
  EXPECT_EQ(Code(WriteFile("pub/f", std::string("mine"), kUser)), EACCES);
  EXPECT_EQ(Code(WriteFile("pub/new", std::string("mine"), kUser)), EACCES);

  uint64_t tmp = Dir("tmp", 01777);
  Caller other{1001, 1001, 0, {}, {}};
  ASSERT_EQ(Code(WriteFile("tmp/theirs", std::string("1001's"), other)), 0);
  EXPECT_EQ(Code(fs_->DeleteFile(kRootIno, "tmp/theirs", kUser)), EPERM);
  EXPECT_EQ(Code(WriteFile("tmp/theirs", std::string("mine"), kUser)), EPERM);
  EXPECT_EQ(ReadAll("tmp/theirs").value(), "1001's");
  ASSERT_EQ(Code(WriteFile("tmp/mine", std::string("mine"), kUser)), 0);
  auto a = fs_->LookupPath(kRootIno, "tmp/mine", kUser);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->uid, 1000u);
  EXPECT_EQ(a->gid, 1000u);
  EXPECT_EQ(a->mode, S_IFREG | 0644u);
  EXPECT_EQ(Code(fs_->DeleteFile(kRootIno, "tmp/mine", kUser)), 0);
  EXPECT_EQ(Code(fs_->DeleteFile(kRootIno, "tmp/theirs", other)), 0);
  EXPECT_EQ(Code(fs_->Lookup(tmp, "theirs")), ENOENT);
  EXPECT_EQ(Code(fs_->DeleteFile(kRootIno, "tmp/theirs", other)), ENOENT);

  // Directories are neither deleted nor replaced.
  Dir("sub", 0755, kRoot, tmp);
  EXPECT_EQ(Code(fs_->DeleteFile(kRootIno, "tmp/sub", kRoot)), EISDIR);
  EXPECT_EQ(Code(WriteFile("tmp/sub", std::string("x"), kRoot)), EISDIR);
  Aligned buf(4096);
  EXPECT_EQ(Code(ReadFile("tmp/sub", 0, buf.span())), EISDIR);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "tmp/sub", kRoot)), 0);
}

// ------------------------------------------------------------ data

TEST_F(WholeFileTest, RoundTripsAreByteExactAndSurviveRemount) {
  const std::vector<size_t> sizes = {0, 1, 4095, 4096, (1 << 20) + 7, 24 << 20};
  Dir("u", 0755, kUser);
  for (size_t size : sizes) {
    std::string data = Pattern(size, static_cast<uint32_t>(size) + 11);
    Aligned src(size);
    std::memcpy(src.p, data.data(), size);
    std::string name = "u/k" + std::to_string(size);
    ASSERT_EQ(Code(WriteFile(name, std::span<const char>(src.p, size), kUser)), 0) << size;
    auto got = ReadAll(name, kUser);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == data) << "size " << size;
    EXPECT_EQ(Load(fs_->Lookup(kRootIno, "u")->ino, name.substr(2)).value(), data)
        << "the POSIX path sees it too, size " << size;
  }
  ASSERT_TRUE(fs_->Sync().ok());
  Remount();
  for (size_t size : sizes) {
    std::string name = "u/k" + std::to_string(size);
    auto got = ReadAll(name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == Pattern(size, static_cast<uint32_t>(size) + 11)) << "size " << size;
  }
}

TEST_F(WholeFileTest, AlignedBuffersMoveWithoutACopyAndUnalignedOnesWork) {
  const size_t size = (3 << 20) + 5000;  // ends in a partial block
  std::string data = Pattern(size, 7);
  Aligned src(size);
  std::memcpy(src.p, data.data(), size);
  uint64_t before = zero_copy();
  ASSERT_EQ(Code(WriteFile("a", std::span<const char>(src.p, size))), 0);
  const uint64_t written_direct = zero_copy() - before;
  EXPECT_EQ(written_direct, AlignDown(size, kBlockSize)) << "all but the tail block";

  // Unaligned source memory: same bytes, through bounce buffers.
  std::vector<char> odd(size + 1);
  std::memcpy(odd.data() + 1, data.data(), size);
  before = zero_copy();
  ASSERT_EQ(Code(WriteFile("b", std::span<const char>(odd.data() + 1, size))), 0);
  EXPECT_EQ(zero_copy(), before);

  ASSERT_TRUE(fs_->DropCache().ok());
  for (const char* name : {"a", "b"}) {
    // Room for the whole last block: everything is read in place.
    Aligned dest(AlignUp(size, kBlockSize));
    before = zero_copy();
    auto n = ReadFile(name, 0, dest.span());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    ASSERT_EQ(*n, size);
    EXPECT_TRUE(std::string(dest.p, size) == data) << name;
    EXPECT_EQ(zero_copy() - before, size) << name;
  }
  // Unaligned destination: correct, no direct bytes.
  std::vector<char> odd_dest(size + 1);
  before = zero_copy();
  auto n = ReadFile("a", 0, std::span<char>(odd_dest.data() + 1, size));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, size);
  EXPECT_TRUE(std::string(odd_dest.data() + 1, size) == data);
  EXPECT_EQ(zero_copy(), before);
}

TEST_F(WholeFileTest, LastPartialBlockIsBouncedWhenTheDestinationEndsInIt) {
  const size_t size = 8192 + 100;
  std::string data = Pattern(size, 9);
  Store(kRootIno, "f", data);
  ASSERT_TRUE(fs_->DropCache().ok());
  Aligned buf(size, kBlockSize);  // guard bytes (0x5a) after `size`
  uint64_t before = zero_copy();
  auto n = ReadFile("f", 0, std::span<char>(buf.p, size));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, size);
  EXPECT_TRUE(std::string(buf.p, size) == data);
  for (size_t k = size; k < AlignUp(size, kBlockSize); ++k) {
    ASSERT_EQ(buf.p[k], 0x5a) << "byte " << k << " past the destination was written";
  }
  EXPECT_EQ(zero_copy() - before, 8192u) << "the two whole blocks went direct";
}

TEST_F(WholeFileTest, RangedReadsAndReadsPastTheEnd) {
  const size_t size = (2 << 20) + 333;
  std::string data = Pattern(size, 5);
  Store(kRootIno, "f", data);
  ASSERT_TRUE(fs_->DropCache().ok());
  Aligned buf(1 << 20);
  for (uint64_t off : {uint64_t{4096}, uint64_t{123}, uint64_t{(1 << 20) - 4096},
                       uint64_t{size - 1000}}) {
    auto n = ReadFile("f", off, buf.span());
    ASSERT_TRUE(n.ok()) << off;
    const size_t want = std::min<size_t>(1 << 20, size - off);
    ASSERT_EQ(*n, want) << off;
    EXPECT_TRUE(std::string(buf.p, want) == data.substr(off, want)) << "offset " << off;
  }
  EXPECT_EQ(ReadFile("f", size, buf.span()).value(), 0u);
  EXPECT_EQ(ReadFile("f", size + 5000, buf.span()).value(), 0u);
  EXPECT_EQ(ReadFile("f", 0, std::span<char>()).value(), 0u);
}

TEST_F(WholeFileTest, ReadFileSeesDataStillStagedByThePosixPath) {
  std::string data = Pattern(300000, 4);
  auto c = fs_->Create(kRootIno, "w", 0644, O_WRONLY | O_CREAT, Caller{});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs_->Write(c->fh, 0, data).ok());  // staged, not flushed
  auto got = ReadAll("w");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(*got == data);
  fs_->Release(c->fh);
}

TEST_F(WholeFileTest, ReplacingKeepsTheOldFileForItsOpenHandles) {
  std::string old_data = Pattern(2 << 20, 1), new_data = Pattern(3 << 20, 2);
  Store(kRootIno, "k", old_data);
  auto a = fs_->Lookup(kRootIno, "k");
  ASSERT_TRUE(a.ok());
  auto fh = fs_->Open(a->ino, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  Aligned src(new_data.size());
  std::memcpy(src.p, new_data.data(), new_data.size());
  ASSERT_EQ(Code(WriteFile("k", std::span<const char>(src.p, new_data.size()))), 0);
  auto now = fs_->LookupPath(kRootIno, "k", kRoot);
  ASSERT_TRUE(now.ok());
  EXPECT_NE(now->ino, a->ino);
  EXPECT_EQ(ReadAll("k").value(), new_data);
  ASSERT_TRUE(fs_->FlushAll().ok());
  ASSERT_TRUE(fs_->DropCache().ok());
  EXPECT_EQ(ReadFh(*fh, 0, old_data.size() + 10).value(), old_data) << "the old handle";
  const uint64_t free_open = fs_->StatFs().free_blocks;
  fs_->Release(*fh);
  fs_->Forget(a->ino, 1);
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_GE(fs_->StatFs().free_blocks, free_open + old_data.size() / kBlockSize)
      << "the old file's space comes back after its last close";
  Remount();
  EXPECT_EQ(ReadAll("k").value(), new_data);
}

TEST_F(WholeFileTest, DeleteRemovesTheNameAndItsSpace) {
  Store(kRootIno, "f", Pattern(4 << 20, 3));
  ASSERT_TRUE(fs_->FlushAll().ok());
  const uint64_t free_before = fs_->StatFs().free_blocks;
  ASSERT_EQ(Code(fs_->DeleteFile(kRootIno, "f", kRoot)), 0);
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(fs_->StatFs().free_blocks, free_before + (4 << 20) / kBlockSize);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "f", kRoot)), ENOENT);
  Remount();
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "f", kRoot)), ENOENT);
}

TEST_F(WholeFileTest, PrefetchLoadsTheCacheThatReadFileThenServes) {
  std::string data = Pattern(3 << 20, 8);
  Store(kRootIno, "p", data);
  ASSERT_TRUE(fs_->DropCache().ok());
  auto queued = fs_->PrefetchFile(kRootIno, "p", kRoot);
  ASSERT_TRUE(queued.ok()) << queued.status().ToString();
  EXPECT_EQ(*queued, data.size());
  EXPECT_EQ(Code(fs_->PrefetchFile(kRootIno, ".", kRoot)), EINVAL);
  const uint64_t hits = fs_->cache_stats().hits;
  const uint64_t zc = zero_copy();
  auto got = ReadAll("p");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(*got == data);
  EXPECT_EQ(fs_->cache_stats().hits, hits + 3) << "every chunk came from the cache";
  EXPECT_EQ(zero_copy(), zc);
  EXPECT_EQ(fs_->PrefetchFile(kRootIno, "p", kRoot).value(), 0u) << "already cached";
}

TEST_F(WholeFileTest, ManyConcurrentCallsCompleteOnEngineThreads) {
  constexpr int kFiles = 48;
  constexpr size_t kSize = 256 << 10;
  std::vector<std::unique_ptr<Aligned>> bufs;
  for (int k = 0; k < kFiles; ++k) {
    bufs.push_back(std::make_unique<Aligned>(kSize));
    std::string d = Pattern(kSize, 100 + k);
    std::memcpy(bufs.back()->p, d.data(), kSize);
  }
  const auto me = std::this_thread::get_id();
  std::atomic<int> left{kFiles}, on_caller{0}, failed{0};
  std::promise<void> all;
  for (int k = 0; k < kFiles; ++k) {
    fs_->WriteFile(kRootIno, "c" + std::to_string(k), std::span<const char>(bufs[k]->p, kSize),
                   kRoot, [&](Status st) {
                     if (!st.ok()) failed++;
                     if (std::this_thread::get_id() == me) on_caller++;
                     if (--left == 0) all.set_value();
                   });
  }
  all.get_future().get();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(on_caller.load(), 0) << "writes complete on engine threads";
  ASSERT_TRUE(fs_->DropCache().ok());
  for (auto& b : bufs) std::memset(b->p, 0, kSize);
  left = kFiles;
  std::promise<void> all_read;
  for (int k = 0; k < kFiles; ++k) {
    fs_->ReadFile(kRootIno, "c" + std::to_string(k), 0, bufs[k]->span(), kRoot,
                  [&](Result<size_t> r) {
                    if (!r.ok() || *r != kSize) failed++;
                    if (std::this_thread::get_id() == me) on_caller++;
                    if (--left == 0) all_read.set_value();
                  });
  }
  all_read.get_future().get();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(on_caller.load(), 0) << "reads complete on engine threads";
  for (int k = 0; k < kFiles; ++k) {
    ASSERT_TRUE(std::string(bufs[k]->p, kSize) == Pattern(kSize, 100 + k)) << k;
  }
}

class SmallVolumeTest : public WholeFileTest {
 protected:
  SmallVolumeTest() { image_bytes_ = 48 << 20; }
};

TEST_F(SmallVolumeTest, EnospcLeavesTheOldFileIntact) {
  std::string old_data = Pattern(8 << 20, 21);
  Store(kRootIno, "k", old_data);
  ASSERT_TRUE(fs_->FlushAll().ok());
  const uint64_t free_before = fs_->StatFs().free_blocks;
  Aligned big(64 << 20);
  EXPECT_EQ(Code(WriteFile("k", std::span<const char>(big.p, big.size))), ENOSPC);
  EXPECT_EQ(ReadAll("k").value(), old_data);
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(fs_->StatFs().free_blocks, free_before) << "the reservation was given back";
  Remount();
  EXPECT_EQ(ReadAll("k").value(), old_data);
}

class VerifiedReadsTest : public WholeFileTest {
 protected:
  FileSystemOptions FsOpts() override {
    FileSystemOptions o;
    o.verify_reads = true;
    return o;
  }
};

TEST_F(VerifiedReadsTest, WrittenFilesCarryTheChecksumsReadsVerify) {
  for (size_t size : {size_t{5000}, size_t{(1 << 20) + 7}}) {
    std::string data = Pattern(size, 31);
    Aligned src(size);
    std::memcpy(src.p, data.data(), size);
    std::string name = "v" + std::to_string(size);
    ASSERT_EQ(Code(WriteFile(name, std::span<const char>(src.p, size))), 0);
    ASSERT_TRUE(fs_->DropCache().ok());
    auto got = ReadAll(name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == data);
    // A ranged, unaligned read checks whole extents too.
    std::vector<char> part(1000);
    auto n = ReadFile(name, 1234, part);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(std::string(part.data(), *n), data.substr(1234, 1000));
  }
}

}  // namespace
}  // namespace kvfs::fs

namespace kvfs::fs {
namespace {

// A throughput check, not run by default (--gtest_also_run_disabled_tests):
// ReadFile of 64 x 4 MiB into aligned memory (zero copy) against the same
// into unaligned memory (bounce + copy) and the POSIX open/read/release path.
class WholeFileBench : public WholeFileTest {
 protected:
  WholeFileBench() { image_bytes_ = 1100ull << 20; }
};

TEST_F(WholeFileBench, DISABLED_ReadFileZeroCopyAgainstCopy) {
  constexpr int kFiles = 64;
  constexpr size_t kSize = 4 << 20;
  std::vector<std::unique_ptr<Aligned>> bufs;
  for (int k = 0; k < kFiles; ++k) bufs.push_back(std::make_unique<Aligned>(kSize, kBlockSize));
  std::atomic<int> left{0}, failed{0};
  auto run = [&](const char* what, auto issue) {
    ASSERT_TRUE(fs_->DropCache().ok());
    left = kFiles;
    std::promise<void> all;
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kFiles; ++k) issue(k, [&] { if (--left == 0) all.set_value(); });
    all.get_future().get();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-28s %8.1f MB/s\n", what, kFiles * kSize / s / 1e6);
  };
  run("WriteFile aligned", [&](int k, auto fin) {
    fs_->WriteFile(kRootIno, "b" + std::to_string(k), std::span<const char>(bufs[k]->p, kSize),
                   kRoot, [&, fin](Status st) { if (!st.ok()) failed++; fin(); });
  });
  run("WriteFile unaligned (copy)", [&](int k, auto fin) {
    fs_->WriteFile(kRootIno, "u" + std::to_string(k),
                   std::span<const char>(bufs[k]->p + 1, kSize - 4096), kRoot,
                   [&, fin](Status st) { if (!st.ok()) failed++; fin(); });
  });
  for (int k = 0; k < kFiles; ++k) ASSERT_TRUE(fs_->DeleteFile(kRootIno, "u" + std::to_string(k), kRoot).ok());
  ASSERT_TRUE(fs_->Sync().ok());
  for (int rep = 0; rep < 2; ++rep) {
    run("ReadFile aligned (0-copy)", [&](int k, auto fin) {
      fs_->ReadFile(kRootIno, "b" + std::to_string(k), 0, bufs[k]->span(), kRoot,
                    [&, fin](Result<size_t> r) { if (!r.ok()) failed++; fin(); });
    });
    run("ReadFile unaligned (copy)", [&](int k, auto fin) {
      fs_->ReadFile(kRootIno, "b" + std::to_string(k), 0, std::span<char>(bufs[k]->p + 1, kSize - 1),
                    kRoot, [&, fin](Result<size_t> r) { if (!r.ok()) failed++; fin(); });
    });
    run("POSIX open/read/release", [&](int k, auto fin) {
      auto a = fs_->Lookup(kRootIno, "b" + std::to_string(k));
      auto fh = fs_->Open(a->ino, O_RDONLY);
      fs_->Read(*fh, 0, kSize, [&, fin, fh = *fh](Status st, std::span<const char>) {
        if (!st.ok()) failed++;
        fs_->Release(fh);
        fin();
      });
    });
  }
  EXPECT_EQ(failed.load(), 0);
}

}  // namespace
}  // namespace kvfs::fs

namespace kvfs::fs {
namespace {

using WholeFileOrderingTest = WriteGated<WholeFileTest>;

TEST_F(WholeFileOrderingTest, TheNameSwitchesOnlyAfterEveryDataWriteCompleted) {
  std::string old_data = Pattern(1 << 20, 1), new_data = Pattern((2 << 20) + 10, 2);
  Store(kRootIno, "k", old_data);
  ASSERT_TRUE(fs_->FlushAll().ok());
  const uint64_t old_ino = *vol_->index().LookupEntry(kRootIno, "k");
  gate_->Hold();
  Aligned src(new_data.size());
  std::memcpy(src.p, new_data.data(), new_data.size());
  std::promise<Status> done;
  fs_->WriteFile(kRootIno, "k", std::span<const char>(src.p, new_data.size()), kRoot,
                 [&](Status st) { done.set_value(st); });
  fs_->WriteFile(kRootIno, "fresh", std::span<const char>(src.p, 4096), kRoot, [](Status) {});
  while (gate_->held() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto fut = done.get_future();
  EXPECT_EQ(fut.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  ASSERT_TRUE(fs_->FlushAll().ok());  // commits everything queued
  EXPECT_EQ(*vol_->index().LookupEntry(kRootIno, "k"), old_ino) << "not switched yet";
  EXPECT_EQ(vol_->index().LookupEntry(kRootIno, "fresh").status().code(), ENOENT)
      << "no name, not even a temporary one, before the data is written";
  EXPECT_EQ(ReadAll("k").value(), old_data);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "fresh", kRoot)), ENOENT);
  gate_->Release();
  ASSERT_TRUE(fut.get().ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_NE(*vol_->index().LookupEntry(kRootIno, "k"), old_ino);
  EXPECT_EQ(ReadAll("k").value(), new_data);
  Remount();
  EXPECT_EQ(ReadAll("k").value(), new_data);
  EXPECT_EQ(ReadAll("fresh").value(), new_data.substr(0, 4096));
}

TEST_F(WholeFileOrderingTest, AFailedDataWriteLeavesTheOldFileAndItsSpace) {
  std::string old_data = Pattern(1 << 20, 3);
  Store(kRootIno, "k", old_data);
  ASSERT_TRUE(fs_->FlushAll().ok());
  const uint64_t free_before = fs_->StatFs().free_blocks;
  gate_->FailWrites(true);
  Aligned src(3 << 20);
  EXPECT_EQ(Code(WriteFile("k", std::span<const char>(src.p, src.size))), EIO);
  EXPECT_EQ(Code(WriteFile("new", std::span<const char>(src.p, 100))), EIO);
  gate_->FailWrites(false);
  EXPECT_EQ(ReadAll("k").value(), old_data);
  EXPECT_EQ(Code(fs_->LookupPath(kRootIno, "new", kRoot)), ENOENT);
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(fs_->StatFs().free_blocks, free_before);
}

}  // namespace
}  // namespace kvfs::fs

namespace kvfs::fs {
namespace {

TEST_F(WholeFileBench, DISABLED_LookupPathRate) {
  constexpr int kNames = 10000;
  for (int k = 0; k < kNames; k += 2) {
    ASSERT_EQ(Code(WriteFile("n" + std::to_string(k), std::string("x"))), 0);
  }
  ASSERT_TRUE(fs_->FlushAll().ok());
  std::vector<std::string> names;
  for (int k = 0; k < kNames; ++k) names.push_back("n" + std::to_string(k));
  for (int rep = 0; rep < 3; ++rep) {
    int found = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& n : names) found += fs_->LookupPath(kRootIno, n, kUser).ok();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("LookupPath: %d names (%d found) %.0f names/s\n", kNames, found, kNames / s);
    EXPECT_EQ(found, kNames / 2);
  }
}

}  // namespace
}  // namespace kvfs::fs
