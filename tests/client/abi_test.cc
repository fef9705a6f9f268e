// libkvfs without a mount: the ABI layout the header promises, and the
// argument checks the library makes before any ioctl.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include <gtest/gtest.h>

#include "kvfs/kvfs.h"
#include "kvfs/kvfs.hpp"

namespace {

// Open fds of this process (to see that failed calls leak none).
int CountFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;  // the DIR's own fd
}

TEST(AbiLayout, EntryFieldsSitAtTheOffsetsOfTheHeader) {
  EXPECT_EQ(sizeof(kvfs_batch_entry), 64u);
  EXPECT_EQ(alignof(kvfs_batch_entry), 8u);
  EXPECT_EQ(offsetof(kvfs_batch_entry, op), 0u);
  EXPECT_EQ(offsetof(kvfs_batch_entry, name_len), 4u);
  EXPECT_EQ(offsetof(kvfs_batch_entry, name_off), 8u);
  EXPECT_EQ(offsetof(kvfs_batch_entry, buf_id), 16u);
  EXPECT_EQ(offsetof(kvfs_batch_entry, buf_off), 24u);
  EXPECT_EQ(offsetof(kvfs_batch_entry, length), 32u);
  EXPECT_EQ(offsetof(kvfs_batch_entry, file_off), 40u);
  EXPECT_EQ(offsetof(kvfs_batch_entry, status), 48u);
  EXPECT_EQ(offsetof(kvfs_batch_entry, flags), 52u);
  EXPECT_EQ(offsetof(kvfs_batch_entry, result), 56u);
}

TEST(AbiLayout, ArgumentStructsHaveNoHiddenPadding) {
  EXPECT_EQ(sizeof(kvfs_register_args), 32u);
  EXPECT_EQ(offsetof(kvfs_register_args, fd), 4u);
  EXPECT_EQ(offsetof(kvfs_register_args, length), 8u);
  EXPECT_EQ(offsetof(kvfs_register_args, flags), 16u);
  EXPECT_EQ(offsetof(kvfs_register_args, buf_id), 24u);
  EXPECT_EQ(sizeof(kvfs_unregister_args), 16u);
  EXPECT_EQ(offsetof(kvfs_unregister_args, buf_id), 8u);
  EXPECT_EQ(sizeof(kvfs_batch_args), 48u);
  EXPECT_EQ(offsetof(kvfs_batch_args, count), 4u);
  EXPECT_EQ(offsetof(kvfs_batch_args, table_id), 8u);
  EXPECT_EQ(offsetof(kvfs_batch_args, table_off), 16u);
  EXPECT_EQ(offsetof(kvfs_batch_args, flags), 24u);
  EXPECT_EQ(offsetof(kvfs_batch_args, completed), 32u);
  EXPECT_EQ(offsetof(kvfs_batch_args, failed), 36u);
  EXPECT_EQ(offsetof(kvfs_batch_args, bytes), 40u);
  EXPECT_EQ(sizeof(kvfs_features_args), 64u);
  EXPECT_EQ(offsetof(kvfs_features_args, reserved), 4u);
  EXPECT_EQ(offsetof(kvfs_features_args, flags), 8u);
  EXPECT_EQ(offsetof(kvfs_features_args, ops), 16u);
  EXPECT_EQ(offsetof(kvfs_features_args, spare), 24u);
}

TEST(AbiLayout, IoctlNumbersEncodeDirectionMagicAndSize) {
  EXPECT_EQ(_IOC_TYPE(KVFS_IOC_REGISTER), 0xB7u);
  EXPECT_EQ(_IOC_NR(KVFS_IOC_REGISTER), 1u);
  EXPECT_EQ(_IOC_DIR(KVFS_IOC_REGISTER), unsigned{_IOC_READ | _IOC_WRITE});
  EXPECT_EQ(_IOC_SIZE(KVFS_IOC_REGISTER), sizeof(kvfs_register_args));
  EXPECT_EQ(_IOC_NR(KVFS_IOC_UNREGISTER), 2u);
  EXPECT_EQ(_IOC_DIR(KVFS_IOC_UNREGISTER), unsigned{_IOC_WRITE});
  EXPECT_EQ(_IOC_SIZE(KVFS_IOC_UNREGISTER), sizeof(kvfs_unregister_args));
  EXPECT_EQ(_IOC_NR(KVFS_IOC_BATCH), 3u);
  EXPECT_EQ(_IOC_DIR(KVFS_IOC_BATCH), unsigned{_IOC_READ | _IOC_WRITE});
  EXPECT_EQ(_IOC_SIZE(KVFS_IOC_BATCH), sizeof(kvfs_batch_args));
  EXPECT_EQ(_IOC_NR(KVFS_IOC_FEATURES), 4u);
  EXPECT_EQ(_IOC_DIR(KVFS_IOC_FEATURES), unsigned{_IOC_READ | _IOC_WRITE});
  EXPECT_EQ(_IOC_SIZE(KVFS_IOC_FEATURES), sizeof(kvfs_features_args));
  // The values the Python module (python/kvfs/abi.py) hard-codes.
  EXPECT_EQ(KVFS_IOC_REGISTER, 0xC020B701u);
  EXPECT_EQ(KVFS_IOC_UNREGISTER, 0x4010B702u);
  EXPECT_EQ(KVFS_IOC_BATCH, 0xC030B703u);
  EXPECT_EQ(KVFS_IOC_FEATURES, 0xC040B704u);
  EXPECT_EQ(KVFS_OPS_BASE, 0x3Eu);  // READ..DELETE, bits 1-5
}

TEST(BufferCreate, RejectsZeroAndOversizedSizesBeforeAnyCall) {
  kvfs_buffer* b = nullptr;
  EXPECT_EQ(kvfs_buffer_create(-1, 0, &b), -EINVAL);
  EXPECT_EQ(kvfs_buffer_create(-1, KVFS_REGISTER_MAX_BYTES + 1, &b), -EINVAL);
  EXPECT_EQ(kvfs_buffer_create(-1, 4096, nullptr), -EINVAL);
  EXPECT_EQ(b, nullptr);
}

TEST(BufferCreate, OnAClosedFdFailsWithEbadf) {
  kvfs_buffer* b = nullptr;
  EXPECT_EQ(kvfs_buffer_create(-1, 4096, &b), -EBADF);
  EXPECT_EQ(b, nullptr);
}

TEST(BufferCreate, OutsideKvfsFailsWithEnottyAndLeaksNoFd) {
  int dir = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  int before = CountFds();
  kvfs_buffer* b = nullptr;
  EXPECT_EQ(kvfs_buffer_create(dir, 1 << 20, &b), -ENOTTY);
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(CountFds(), before);
  kvfs::client::Buffer cb;
  EXPECT_EQ(kvfs::client::Buffer::Create(dir, 4096, &cb), -ENOTTY);
  EXPECT_FALSE(cb);
  close(dir);
}

TEST(RawCalls, OutsideKvfsReturnNegativeErrno) {
  int dir = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  uint64_t id = 7;
  EXPECT_EQ(kvfs_register(dir, dir, 4096, &id), -ENOTTY);
  EXPECT_EQ(id, 7u);  // untouched on failure
  EXPECT_EQ(kvfs_unregister(dir, 1), -ENOTTY);
  kvfs_batch_args a{};
  EXPECT_EQ(kvfs_batch_raw(dir, 1, 0, 1, &a), -ENOTTY);
  EXPECT_EQ(kvfs_batch_raw(-1, 1, 0, 1, &a), -EBADF);
  EXPECT_EQ(kvfs_register(dir, dir, 4096, nullptr), -EINVAL);
  close(dir);
}

TEST(Features, WhereTheCallIsUnknownTheBaseOpsAreAssumed) {
  // /tmp answers ENOTTY as a daemon from before KVFS_IOC_FEATURES does.
  int dir = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  kvfs_features_args f;
  std::memset(&f, 0xff, sizeof f);
  EXPECT_EQ(kvfs_features(dir, &f), 1);
  EXPECT_EQ(f.version, 1u);
  EXPECT_EQ(f.ops, uint64_t{KVFS_OPS_BASE});
  EXPECT_EQ(f.spare[4], 0u);
  EXPECT_EQ(kvfs::client::Features(dir, &f), 1);
  EXPECT_EQ(kvfs_features(dir, nullptr), -EINVAL);
  EXPECT_EQ(kvfs_features(-1, &f), -EBADF);
  close(dir);
}

TEST(TableCreate, RejectsCapacityOutsideOneToTheBatchLimit) {
  kvfs_table* t = nullptr;
  EXPECT_EQ(kvfs_table_create(-1, 0, 0, &t), -EINVAL);
  EXPECT_EQ(kvfs_table_create(-1, KVFS_BATCH_MAX_ENTRIES + 1, 0, &t), -EINVAL);
  EXPECT_EQ(kvfs_table_create(-1, 1, KVFS_REGISTER_MAX_BYTES, &t), -EINVAL);
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(kvfs_table_create(-1, 1, 0, &t), -EBADF);
}

TEST(Helpers, RejectMissingArraysBeforeAnyCall) {
  const char* names[] = {"a", nullptr};
  int st[2];
  uint64_t off[2] = {0, 0};
  EXPECT_EQ(kvfs_stat_batch(-1, nullptr, 1, nullptr, st, nullptr), -EINVAL);
  EXPECT_EQ(kvfs_stat_batch(-1, nullptr, 1, names, nullptr, nullptr), -EINVAL);
  EXPECT_EQ(kvfs_stat_batch(-1, nullptr, 2, names, st, nullptr), -EINVAL);  // NULL name
  EXPECT_EQ(kvfs_read_batch(-1, nullptr, 1, names, nullptr, nullptr, off, st, nullptr), -EINVAL);
  EXPECT_EQ(kvfs_write_batch(-1, nullptr, 1, names, nullptr, off, nullptr, st, nullptr), -EINVAL);
  EXPECT_EQ(kvfs_delete_batch(-1, nullptr, 0, nullptr, nullptr), 0);  // nothing to do
}

TEST(Helpers, OutsideKvfsFailTheCallAndEveryEntry) {
  int dir = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  const char* names[] = {"a", "b"};
  int st[2] = {1, 1};
  EXPECT_EQ(kvfs_stat_batch(dir, nullptr, 2, names, st, nullptr), -ENOTTY);
  EXPECT_EQ(st[0], -ENOTTY);
  EXPECT_EQ(st[1], -ENOTTY);
  close(dir);
}

}  // namespace
