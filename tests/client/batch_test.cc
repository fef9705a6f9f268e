// libkvfs against a real mount: every op round trips byte-exact, results
// per entry in input order, plain memory, table layout and limits,
// registrations that end, threads. The mount comes from KVFS_TEST_MOUNT
// (tests/integration/test_client_lib.py mounts a volume and runs these);
// each test works in a directory of its own under it.
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "kvfs/kvfs.h"
#include "kvfs/kvfs.hpp"
#include "util/pattern.h"

namespace {

using kvfs::testing::Pattern;

class Mounted : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* mount = std::getenv("KVFS_TEST_MOUNT");
    if (mount == nullptr) {
      GTEST_FAIL() << "KVFS_TEST_MOUNT must name a kvfs mount "
                      "(run through tests/integration/test_client_lib.py)";
    }
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::string(mount) + "/" + info->test_suite_name() + "." + info->name();
    ASSERT_EQ(mkdir(path_.c_str(), 0755), 0) << path_ << ": " << std::strerror(errno);
    dir_ = open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dir_, 0) << std::strerror(errno);
  }
  void TearDown() override {
    if (dir_ >= 0) close(dir_);
  }

  std::string P(const std::string& name) const { return path_ + "/" + name; }

  void PosixWrite(const std::string& name, const std::string& data) const {
    int fd = open(P(name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = write(fd, data.data() + done, data.size() - done);
      ASSERT_GT(n, 0) << std::strerror(errno);
      done += static_cast<size_t>(n);
    }
    ASSERT_EQ(close(fd), 0);
  }

  // The file's bytes through read(2), or "<errno N>".
  std::string PosixRead(const std::string& name) const {
    int fd = open(P(name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "<errno " + std::to_string(errno) + ">";
    std::string out;
    char chunk[1 << 16];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof chunk)) > 0) out.append(chunk, static_cast<size_t>(n));
    close(fd);
    return out;
  }

  std::string path_;
  int dir_ = -1;
};

std::string Key(int i) { return "key-" + std::to_string(i); }

// Sizes across the aligned (no copy) and unaligned (bounce) paths.
const std::vector<size_t> kSizes = {1, 1000, 4096, 4097, 65536, 256 << 10, (1 << 20) + 123};

TEST_F(Mounted, WriteThenReadRoundTripsByteExactAtAlignedAndUnalignedSizes) {
  const size_t slot = 2 << 20;
  kvfs_buffer* out = nullptr;
  kvfs_buffer* in = nullptr;
  ASSERT_EQ(kvfs_buffer_create(dir_, slot * kSizes.size(), &out), 0);
  ASSERT_EQ(kvfs_buffer_create(dir_, slot * kSizes.size(), &in), 0);
  EXPECT_NE(kvfs_buffer_id(out), kvfs_buffer_id(in));
  kvfs_table* t = nullptr;
  ASSERT_EQ(kvfs_table_create(dir_, 64, 0, &t), 0);
  auto* src = static_cast<char*>(kvfs_buffer_data(out));
  for (size_t i = 0; i < kSizes.size(); i++) {
    std::string data = Pattern(kSizes[i], static_cast<uint32_t>(i));
    std::memcpy(src + i * slot, data.data(), data.size());
    std::string name = Key(static_cast<int>(i));
    ASSERT_EQ(kvfs_table_add_write(t, name.data(), name.size(), out, i * slot, kSizes[i]),
              static_cast<int>(i));
  }
  kvfs_batch_args sum{};
  ASSERT_EQ(kvfs_batch(dir_, t, &sum), 0);
  uint64_t total = 0;
  for (size_t i = 0; i < kSizes.size(); i++) {
    EXPECT_EQ(kvfs_table_status(t, i), 0) << i;
    EXPECT_EQ(kvfs_table_result(t, i), kSizes[i]) << i;
    EXPECT_EQ(PosixRead(Key(static_cast<int>(i))), Pattern(kSizes[i], static_cast<uint32_t>(i)));
    total += kSizes[i];
  }
  EXPECT_EQ(sum.completed, kSizes.size());
  EXPECT_EQ(sum.failed, 0u);
  EXPECT_EQ(sum.bytes, total);

  kvfs_table_reset(t);
  EXPECT_EQ(kvfs_table_count(t), 0u);
  for (size_t i = 0; i < kSizes.size(); i++) {
    std::string name = Key(static_cast<int>(i));
    ASSERT_EQ(kvfs_table_add_read(t, name.data(), name.size(), in, i * slot, slot, 0),
              static_cast<int>(i));
  }
  ASSERT_EQ(kvfs_batch(dir_, t, &sum), 0);
  auto* dst = static_cast<const char*>(kvfs_buffer_data(in));
  for (size_t i = 0; i < kSizes.size(); i++) {
    ASSERT_EQ(kvfs_table_status(t, i), 0) << i;
    ASSERT_EQ(kvfs_table_result(t, i), kSizes[i]) << i;
    EXPECT_EQ(std::string(dst + i * slot, kSizes[i]), Pattern(kSizes[i], static_cast<uint32_t>(i)))
        << "entry " << i;
  }
  EXPECT_EQ(sum.bytes, total);
  kvfs_table_destroy(t);
  EXPECT_EQ(kvfs_buffer_destroy(in), 0);
  EXPECT_EQ(kvfs_buffer_destroy(out), 0);
}

// KernelPageSize (KiB) of this process's mapping that holds `p`; 0 if none.
long KernelPageKib(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("KernelPageSize:", 0) == 0) {
      return std::strtol(line.c_str() + 15, nullptr, 10);
    }
  }
  return 0;
}

// Run by test_client_lib.py with huge pages reserved (vm.nr_hugepages).
TEST_F(Mounted, HugePageBuffersWhenReservedMoveBytesExactly) {
  if (std::getenv("KVFS_TEST_HUGE_PAGES") == nullptr) GTEST_SKIP() << "no huge pages reserved";
  const size_t kKey = 1 << 20;
  kvfs_buffer* buf = nullptr;
  ASSERT_EQ(kvfs_buffer_create(dir_, 4 * kKey, &buf), 0);
  EXPECT_EQ(KernelPageKib(kvfs_buffer_data(buf)), 2048);
  kvfs_buffer* small = nullptr;
  ASSERT_EQ(kvfs_buffer_create(dir_, 256 << 10, &small), 0);
  EXPECT_EQ(KernelPageKib(kvfs_buffer_data(small)), 4);  // not a multiple of 2 MiB
  kvfs_buffer_destroy(small);
  char* b = static_cast<char*>(kvfs_buffer_data(buf));
  std::vector<std::string> names;
  std::vector<const char*> cnames;
  std::vector<uint64_t> offs, lens;
  for (int i = 0; i < 4; i++) names.push_back(Key(i));
  for (int i = 0; i < 4; i++) {
    cnames.push_back(names[i].c_str());
    offs.push_back(i * kKey);
    lens.push_back(kKey);
    std::string data = Pattern(kKey, 300 + i);
    std::memcpy(b + i * kKey, data.data(), kKey);
  }
  kvfs_table* t = nullptr;
  ASSERT_EQ(kvfs_table_create(dir_, 4, 0, &t), 0);
  int st[4];
  uint64_t got[4];
  ASSERT_EQ(kvfs_write_batch(dir_, t, 4, cnames.data(), buf, offs.data(), lens.data(), st, got), 0);
  std::memset(b, 0, 4 * kKey);
  ASSERT_EQ(kvfs_read_batch(dir_, t, 4, cnames.data(), buf, offs.data(), lens.data(), st, got), 0);
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(std::string(b + i * kKey, kKey), Pattern(kKey, 300 + i)) << i;
    EXPECT_EQ(PosixRead(names[i]), Pattern(kKey, 300 + i)) << i;
  }
  kvfs_table_destroy(t);
  EXPECT_EQ(kvfs_buffer_destroy(buf), 0);
}

TEST_F(Mounted, ReadsARangeAndStopsAtEndOfFile) {
  std::string data = Pattern(3 << 20, 9);
  PosixWrite("f", data);
  kvfs::client::Buffer buf;
  kvfs::client::Table t;
  ASSERT_EQ(kvfs::client::Buffer::Create(dir_, 8 << 20, &buf), 0);
  ASSERT_EQ(kvfs::client::Table::Create(dir_, 4, 0, &t), 0);
  ASSERT_EQ(t.AddRead("f", buf, 0, 1 << 20, 1 << 20), 0);        // aligned middle MiB
  ASSERT_EQ(t.AddRead("f", buf, 1 << 20, 5000, 12345), 1);       // unaligned range
  ASSERT_EQ(t.AddRead("f", buf, 2 << 20, 4 << 20, 2 << 20), 2);  // runs past the end
  ASSERT_EQ(t.AddRead("f", buf, 7 << 20, 4096, 3 << 20), 3);     // starts at the end
  ASSERT_EQ(t.Run(dir_), 0);
  const char* b = static_cast<const char*>(buf.data());
  EXPECT_EQ(t.result(0), 1u << 20);
  EXPECT_EQ(std::string(b, 1 << 20), data.substr(1 << 20, 1 << 20));
  EXPECT_EQ(t.result(1), 5000u);
  EXPECT_EQ(std::string(b + (1 << 20), 5000), data.substr(12345, 5000));
  EXPECT_EQ(t.result(2), 1u << 20);
  EXPECT_EQ(std::string(b + (2 << 20), 1 << 20), data.substr(2 << 20));
  EXPECT_EQ(t.result(3), 0u);
}

TEST_F(Mounted, FeaturesNameTheAbiVersionAndEveryOpTheDaemonRuns) {
  kvfs_features_args f;
  ASSERT_EQ(kvfs_features(dir_, &f), 0);
  EXPECT_EQ(f.version, KVFS_ABI_VERSION);
  const uint64_t all = KVFS_OPS_BASE | KVFS_OP_BIT(KVFS_OP_EXISTS);
  EXPECT_EQ(f.ops, all);
  // A regular file of the mount answers too.
  PosixWrite("f", "x");
  int fd = open(P("f").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  kvfs_features_args g;
  EXPECT_EQ(kvfs::client::Features(fd, &g), 0);
  EXPECT_EQ(g.ops, f.ops);
  close(fd);
  // Reserved fields are refused, as in every call of the ABI.
  kvfs_features_args bad{};
  bad.flags = 1;
  EXPECT_EQ(ioctl(dir_, KVFS_IOC_FEATURES, &bad), -1);
  EXPECT_EQ(errno, EINVAL);
  // A table knows the same set; an op outside it fails its entry alone.
  kvfs::client::Table t;
  ASSERT_EQ(kvfs::client::Table::Create(dir_, 2, 0, &t), 0);
  for (uint32_t op = 0; op < 64; op++) {
    EXPECT_EQ(t.Supports(op), (all & KVFS_OP_BIT(op)) != 0) << op;
  }
  ASSERT_EQ(t.Add(KVFS_OP_EXISTS + 1, "f", 0, 0, 0, 0), 0);
  ASSERT_EQ(t.AddExists("f"), 1);
  EXPECT_EQ(t.Run(dir_), 1);
  EXPECT_EQ(t.status(0), -EINVAL);
  EXPECT_EQ(t.status(1), 0);
}

TEST_F(Mounted, StatPrefetchAndDeleteReportEachEntryInInputOrder) {
  const char* names[] = {"a", "missing-1", "b", "c", "missing-2", "sub/x"};
  ASSERT_EQ(mkdir(P("sub").c_str(), 0755), 0);
  PosixWrite("a", Pattern(10, 1));
  PosixWrite("b", Pattern(8192, 2));
  PosixWrite("c", "");
  PosixWrite("sub/x", Pattern(300000, 3));
  const uint64_t want_size[] = {10, 0, 8192, 0, 0, 300000};
  const int want_status[] = {0, -ENOENT, 0, 0, -ENOENT, 0};
  int st[6];
  uint64_t res[6];
  EXPECT_EQ(kvfs_stat_batch(dir_, nullptr, 6, names, st, res), 2);
  for (int i = 0; i < 6; i++) {
    EXPECT_EQ(st[i], want_status[i]) << names[i];
    EXPECT_EQ(res[i], want_size[i]) << names[i];
  }
  // EXISTS: the same answers without a size; a directory exists too.
  const char* with_dir[] = {"a", "missing-1", "sub", "sub/x", "sub/missing", "missing-2/x"};
  const int want_exists[] = {0, -ENOENT, 0, 0, -ENOENT, -ENOENT};
  EXPECT_EQ(kvfs_exists_batch(dir_, nullptr, 6, with_dir, st), 3);
  for (int i = 0; i < 6; i++) EXPECT_EQ(st[i], want_exists[i]) << with_dir[i];
  const char* through_file[] = {"a/x"};
  EXPECT_EQ(kvfs_exists_batch(dir_, nullptr, 1, through_file, st), 1);
  EXPECT_EQ(st[0], -ENOTDIR);
  EXPECT_EQ(kvfs_prefetch_batch(dir_, nullptr, 6, names, st, res), 2);
  for (int i = 0; i < 6; i++) EXPECT_EQ(st[i], want_status[i]) << names[i];
  EXPECT_LE(res[5], 300000u + 4096);
  EXPECT_EQ(kvfs_delete_batch(dir_, nullptr, 6, names, st), 2);
  for (int i = 0; i < 6; i++) EXPECT_EQ(st[i], want_status[i]) << names[i];
  for (const char* n : names) EXPECT_EQ(PosixRead(n), "<errno 2>") << n;
  EXPECT_EQ(kvfs_delete_batch(dir_, nullptr, 6, names, st), 6);
  for (int i = 0; i < 6; i++) EXPECT_EQ(st[i], -ENOENT) << names[i];
}

TEST_F(Mounted, ThirtyTwoKeysInOneReadWithMixedHitsAndMisses) {
  const size_t kKey = 256 << 10;
  std::vector<std::string> names;
  for (int i = 0; i < 32; i++) {
    names.push_back(Key(i));
    if (i % 3 != 1) PosixWrite(Key(i), Pattern(kKey, 100 + i));
  }
  std::vector<const char*> cnames;
  std::vector<uint64_t> offs, lens;
  for (int i = 0; i < 32; i++) {
    cnames.push_back(names[i].c_str());
    offs.push_back(i * kKey);
    lens.push_back(kKey);
  }
  kvfs_buffer* buf = nullptr;
  ASSERT_EQ(kvfs_buffer_create(dir_, 32 * kKey, &buf), 0);
  kvfs_table* t = nullptr;
  ASSERT_EQ(kvfs_table_create(dir_, 32, 0, &t), 0);
  int st[32];
  uint64_t got[32];
  int misses = 0;
  for (int i = 0; i < 32; i++) misses += i % 3 == 1;
  // One call: the table has room for all 32.
  EXPECT_EQ(kvfs_read_batch(dir_, t, 32, cnames.data(), buf, offs.data(), lens.data(), st, got),
            misses);
  EXPECT_EQ(kvfs_table_count(t), 32u);
  const char* b = static_cast<const char*>(kvfs_buffer_data(buf));
  for (int i = 0; i < 32; i++) {
    if (i % 3 == 1) {
      EXPECT_EQ(st[i], -ENOENT) << i;
      EXPECT_EQ(got[i], 0u) << i;
    } else {
      ASSERT_EQ(st[i], 0) << i;
      ASSERT_EQ(got[i], kKey) << i;
      EXPECT_EQ(std::string(b + i * kKey, kKey), Pattern(kKey, 100 + i)) << i;
    }
  }
  kvfs_table_destroy(t);
  EXPECT_EQ(kvfs_buffer_destroy(buf), 0);
}

TEST_F(Mounted, PlainMemoryOfTheCallerIsReadAndWrittenThroughBufIdZero) {
  std::string data = Pattern(100000, 5);
  kvfs::client::Table t;
  ASSERT_EQ(kvfs::client::Table::Create(dir_, 2, 0, &t), 0);
  ASSERT_EQ(t.AddWriteMem("plain", std::as_bytes(std::span(data))), 0);
  ASSERT_EQ(t.Run(dir_), 0) << t.status(0);
  EXPECT_EQ(t.result(0), data.size());
  EXPECT_EQ(PosixRead("plain"), data);
  std::vector<std::byte> dest(200000, std::byte{0x5a});
  t.Clear();
  ASSERT_EQ(t.AddReadMem("plain", std::span(dest).subspan(7, 150000)), 0);
  ASSERT_EQ(t.Run(dir_), 0) << t.status(0);
  EXPECT_EQ(t.result(0), data.size());
  EXPECT_EQ(std::memcmp(dest.data() + 7, data.data(), data.size()), 0);
  EXPECT_EQ(dest[6], std::byte{0x5a});
  EXPECT_EQ(dest[7 + data.size()], std::byte{0x5a});  // nothing past the bytes read
}

TEST_F(Mounted, TableLaysEntriesAndNamesInItsRegisteredMemoryAndRefusesWhatDoesNotFit) {
  kvfs_table* t = nullptr;
  ASSERT_EQ(kvfs_table_create(dir_, 2, 10, &t), 0);
  EXPECT_EQ(kvfs_table_capacity(t), 2u);
  ASSERT_EQ(kvfs_table_add_stat(t, "abc", 3), 0);
  const kvfs_batch_entry* e0 = kvfs_table_entry(t, 0);
  const char* base = reinterpret_cast<const char*>(e0);  // entries start the region
  EXPECT_EQ(e0->op, unsigned{KVFS_OP_STAT});
  EXPECT_EQ(e0->name_len, 3u);
  EXPECT_EQ(e0->name_off, 2 * sizeof(kvfs_batch_entry));
  EXPECT_EQ(std::string(base + e0->name_off, 3), "abc");
  EXPECT_EQ(e0->flags, 0u);
  // The region is one page: 2 entries, then 4096 - 128 bytes of names.
  std::string too_long(4096 - 128 - 3 + 1, 'n');
  EXPECT_EQ(kvfs_table_add_stat(t, too_long.data(), too_long.size()), -ENOSPC);
  std::string over_path_max(KVFS_PATH_MAX + 1, 'n');
  EXPECT_EQ(kvfs_table_add_stat(t, over_path_max.data(), over_path_max.size()), -ENAMETOOLONG);
  ASSERT_EQ(kvfs_table_add_delete(t, "de", 2), 1);
  EXPECT_EQ(kvfs_table_entry(t, 1)->name_off, 2 * sizeof(kvfs_batch_entry) + 3);
  EXPECT_EQ(kvfs_table_add_stat(t, "x", 1), -ENOSPC);  // entries full
  EXPECT_EQ(kvfs_table_count(t), 2u);
  EXPECT_EQ(kvfs_batch(dir_, t, nullptr), 2);  // both missing
  EXPECT_EQ(kvfs_table_status(t, 0), -ENOENT);
  EXPECT_EQ(kvfs_table_entry(t, 0)->status, ENOENT);  // raw ABI: positive
  kvfs_table_reset(t);
  EXPECT_EQ(kvfs_batch(dir_, t, nullptr), 0);  // empty: no call
  kvfs_table_destroy(t);
}

TEST_F(Mounted, HelpersRunSeveralCallsWhenTheScratchTableIsFull) {
  std::vector<std::string> names;
  std::vector<const char*> cnames;
  for (int i = 0; i < 10; i++) names.push_back(Key(i));
  for (int i = 0; i < 10; i += 2) PosixWrite(names[i], Pattern(i + 1, i));
  for (auto& n : names) cnames.push_back(n.c_str());
  kvfs_table* t = nullptr;
  ASSERT_EQ(kvfs_table_create(dir_, 3, 0, &t), 0);
  int st[10];
  uint64_t sizes[10];
  EXPECT_EQ(kvfs_stat_batch(dir_, t, 10, cnames.data(), st, sizes), 5);
  for (int i = 0; i < 10; i++) {
    EXPECT_EQ(st[i], i % 2 ? -ENOENT : 0) << i;
    EXPECT_EQ(sizes[i], i % 2 ? 0u : uint64_t(i + 1)) << i;
  }
  EXPECT_EQ(kvfs_table_count(t), 1u);  // the last of four calls
  kvfs_table_destroy(t);
}

TEST_F(Mounted, CallOnAFileFailsAndMarksEveryEntry) {
  PosixWrite("file", "x");
  int fd = open(P("file").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  kvfs_table* t = nullptr;
  ASSERT_EQ(kvfs_table_create(dir_, 2, 0, &t), 0);
  ASSERT_EQ(kvfs_table_add_stat(t, "file", 4), 0);
  ASSERT_EQ(kvfs_table_add_stat(t, "file", 4), 1);
  kvfs_batch_args sum;
  std::memset(&sum, 0xff, sizeof sum);
  EXPECT_EQ(kvfs_batch(fd, t, &sum), -ENOTDIR);
  EXPECT_EQ(kvfs_table_status(t, 0), -ENOTDIR);
  EXPECT_EQ(kvfs_table_status(t, 1), -ENOTDIR);
  EXPECT_EQ(sum.count, 0u);  // zeroed on a call failure
  EXPECT_EQ(sum.bytes, 0u);
  EXPECT_EQ(kvfs_batch(dir_, t, &sum), 0);  // the same table on the directory
  EXPECT_EQ(sum.completed, 2u);
  kvfs_table_destroy(t);
  close(fd);
}

TEST_F(Mounted, ADestroyedBufferIsNoLongerRegistered) {
  PosixWrite("f", Pattern(8192, 1));
  kvfs_buffer* buf = nullptr;
  ASSERT_EQ(kvfs_buffer_create(dir_, 8192, &buf), 0);
  uint64_t id = kvfs_buffer_id(buf);
  ASSERT_EQ(kvfs_buffer_destroy(buf), 0);
  EXPECT_EQ(kvfs_unregister(dir_, id), -EBADF);
  kvfs_table* t = nullptr;
  ASSERT_EQ(kvfs_table_create(dir_, 1, 0, &t), 0);
  ASSERT_EQ(kvfs_table_add(t, KVFS_OP_READ, "f", 1, id, 0, 8192, 0), 0);
  EXPECT_EQ(kvfs_batch(dir_, t, nullptr), 1);
  EXPECT_EQ(kvfs_table_status(t, 0), -EBADF);
  kvfs_table_destroy(t);
}

TEST_F(Mounted, AForkChildCannotUseItsParentsBuffer) {
  PosixWrite("f", Pattern(4096, 1));
  kvfs::client::Buffer buf;
  ASSERT_EQ(kvfs::client::Buffer::Create(dir_, 4096, &buf), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: a table of its own works, the parent's buffer id does not.
    kvfs_table* t = nullptr;
    if (kvfs_table_create(dir_, 1, 0, &t) != 0) _exit(10);
    if (kvfs_table_add_read(t, "f", 1, buf.get(), 0, 4096, 0) != 0) _exit(11);
    int rc = kvfs_batch(dir_, t, nullptr);
    _exit(rc == 1 && kvfs_table_status(t, 0) == -EBADF ? 0 : 20 + (rc < 0 ? 1 : 0));
  }
  int ws = 0;
  ASSERT_EQ(waitpid(pid, &ws, 0), pid);
  ASSERT_TRUE(WIFEXITED(ws));
  EXPECT_EQ(WEXITSTATUS(ws), 0) << "10/11: setup failed; 20: not EBADF; 21: the call failed";
  // The parent's registration is untouched.
  kvfs::client::Table t;
  ASSERT_EQ(kvfs::client::Table::Create(dir_, 1, 0, &t), 0);
  ASSERT_EQ(t.AddRead("f", buf, 0, 4096), 0);
  EXPECT_EQ(t.Run(dir_), 0);
}

TEST_F(Mounted, EightThreadsRunBatchesConcurrently) {
  constexpr int kThreads = 8, kKeys = 16, kRounds = 4;
  constexpr size_t kKey = 64 << 10;
  kvfs::client::Buffer buf;  // shared; each thread uses its own slots
  ASSERT_EQ(kvfs::client::Buffer::Create(dir_, 2 * kThreads * kKeys * kKey, &buf), 0);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; th++) {
    threads.emplace_back([&, th] {
      kvfs::client::Table t;
      if (int rc = kvfs::client::Table::Create(dir_, kKeys, 0, &t); rc != 0) {
        errors[th] = "table " + std::to_string(rc);
        return;
      }
      char* base = static_cast<char*>(buf.data()) + size_t(th) * 2 * kKeys * kKey;
      for (int round = 0; round < kRounds && errors[th].empty(); round++) {
        t.Clear();
        for (int k = 0; k < kKeys; k++) {
          std::string data = Pattern(kKey, uint32_t(th * 1000 + round * 100 + k));
          std::memcpy(base + k * kKey, data.data(), kKey);
          std::string name = "t" + std::to_string(th) + "-" + std::to_string(k);
          (void)t.AddWrite(name, buf, uint64_t(base - static_cast<char*>(buf.data())) + k * kKey,
                           kKey);
        }
        if (int rc = t.Run(dir_); rc != 0) errors[th] = "write batch " + std::to_string(rc);
        t.Clear();
        for (int k = 0; k < kKeys; k++) {
          std::string name = "t" + std::to_string(th) + "-" + std::to_string(k);
          (void)t.AddRead(name, buf,
                          uint64_t(base - static_cast<char*>(buf.data())) + (kKeys + k) * kKey,
                          kKey);
        }
        if (int rc = t.Run(dir_); rc != 0) errors[th] = "read batch " + std::to_string(rc);
        for (int k = 0; k < kKeys && errors[th].empty(); k++) {
          if (std::string(base + (kKeys + k) * kKey, kKey) !=
              Pattern(kKey, uint32_t(th * 1000 + round * 100 + k))) {
            errors[th] = "key " + std::to_string(k) + " round " + std::to_string(round) +
                         " read back different bytes";
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int th = 0; th < kThreads; th++) EXPECT_EQ(errors[th], "") << "thread " << th;
}

}  // namespace
