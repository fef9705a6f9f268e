// fuse/batch_decode.h against malformed tables: every field out of range,
// names and memory past their regions, overlapping names.
#include "fuse/batch_decode.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>

namespace kvfs::fuse {
namespace {

kvfs_batch_args Args() {
  kvfs_batch_args a{};
  a.version = KVFS_ABI_VERSION;
  a.count = 1;
  return a;
}

kvfs_batch_entry Entry(uint32_t op) {
  kvfs_batch_entry e{};
  e.op = op;
  e.name_len = 1;
  e.length = op == KVFS_OP_READ || op == KVFS_OP_WRITE ? 4096 : 0;
  return e;
}

TEST(BatchDecodeTest, ArgsOutOfRangeRefuseTheCall) {
  EXPECT_EQ(CheckBatchArgs(Args(), sizeof(kvfs_batch_args), true).error, 0);
  EXPECT_EQ(CheckBatchArgs(Args(), sizeof(kvfs_batch_args) - 1, true).error, EINVAL);
  auto a = Args();
  a.flags = 1;
  EXPECT_EQ(CheckBatchArgs(a, sizeof(a), true).error, EINVAL);
  a = Args();
  a.count = 0;
  EXPECT_EQ(CheckBatchArgs(a, sizeof(a), true).error, EINVAL);
  a.count = KVFS_BATCH_MAX_ENTRIES;
  EXPECT_EQ(CheckBatchArgs(a, sizeof(a), true).error, 0);
  a.count = KVFS_BATCH_MAX_ENTRIES + 1;
  EXPECT_EQ(CheckBatchArgs(a, sizeof(a), true).error, E2BIG);
  a = Args();
  EXPECT_EQ(CheckBatchArgs(a, sizeof(a), false).error, ENOTDIR);
  a.table_off = 4;
  EXPECT_EQ(CheckBatchArgs(a, sizeof(a), true).error, EINVAL);
}

TEST(BatchDecodeTest, FeaturesNameExactlyTheOpsEntriesMayUse) {
  kvfs_features_args in{};
  in.version = 7;  // any: the call is how a client learns the daemon's
  kvfs_features_args out{};
  ASSERT_EQ(AnswerFeatures(in, sizeof(out), &out).error, 0);
  EXPECT_EQ(out.version, KVFS_ABI_VERSION);
  EXPECT_EQ(out.reserved, 0u);
  for (uint64_t spare : out.spare) EXPECT_EQ(spare, 0u);
  EXPECT_EQ(out.ops & KVFS_OPS_BASE, KVFS_OPS_BASE) << "every daemon runs the base set";
  EXPECT_NE(out.ops & KVFS_OP_BIT(KVFS_OP_EXISTS), 0u);
  for (uint32_t op = 0; op < 64; ++op) {
    const bool listed = (out.ops & KVFS_OP_BIT(op)) != 0;
    EXPECT_EQ(CheckEntryHeader(Entry(op)) == 0, listed) << op;
    EXPECT_EQ(FindOp(op) != nullptr, listed) << op;
    if (listed) {
      EXPECT_EQ(DecodeEntry(Entry(op), "a").error, 0) << op;
    }
  }
}

TEST(BatchDecodeTest, FeaturesArgsOutOfRangeRefuseTheCall) {
  kvfs_features_args in{}, out{};
  EXPECT_EQ(AnswerFeatures(in, sizeof(out) - 1, &out).error, EINVAL);
  in.flags = 1;
  EXPECT_EQ(AnswerFeatures(in, sizeof(out), &out).error, EINVAL);
  in.flags = 0;
  in.reserved = 1;
  EXPECT_EQ(AnswerFeatures(in, sizeof(out), &out).error, EINVAL);
}

TEST(BatchDecodeTest, EntryHeaderFieldsOutOfRange) {
  for (uint32_t op = KVFS_OP_READ; op <= KVFS_OP_EXISTS; ++op) {
    EXPECT_EQ(CheckEntryHeader(Entry(op)), 0) << op;
  }
  EXPECT_EQ(CheckEntryHeader(Entry(0)), EINVAL);
  EXPECT_EQ(CheckEntryHeader(Entry(KVFS_OP_EXISTS + 1)), EINVAL);
  EXPECT_EQ(CheckEntryHeader(Entry(UINT32_MAX)), EINVAL);
  auto e = Entry(KVFS_OP_STAT);
  e.flags = 1;
  EXPECT_EQ(CheckEntryHeader(e), EINVAL);
  e = Entry(KVFS_OP_WRITE);
  e.file_off = 1;
  EXPECT_EQ(CheckEntryHeader(e), EINVAL) << "file_off is READ's alone";
  e = Entry(KVFS_OP_READ);
  e.file_off = 12345;
  EXPECT_EQ(CheckEntryHeader(e), 0);
  e.name_len = 0;
  EXPECT_EQ(CheckEntryHeader(e), EINVAL);
  e.name_len = KVFS_PATH_MAX;
  EXPECT_EQ(CheckEntryHeader(e), 0);
  e.name_len = KVFS_PATH_MAX + 1;
  EXPECT_EQ(CheckEntryHeader(e), ENAMETOOLONG);
}

TEST(BatchDecodeTest, NamesPastTheTableAndOverlappingNames) {
  auto e = Entry(KVFS_OP_STAT);
  e.name_off = 100;
  e.name_len = 28;
  EXPECT_EQ(CheckNameInTable(e, 128), 0) << "ends exactly at the end";
  e.name_len = 29;
  EXPECT_EQ(CheckNameInTable(e, 128), EFAULT);
  e.name_off = 129;
  e.name_len = 1;
  EXPECT_EQ(CheckNameInTable(e, 128), EFAULT);
  e.name_off = UINT64_MAX;
  e.name_len = 2;
  EXPECT_EQ(CheckNameInTable(e, 128), EFAULT) << "no wrap-around";
  // Two entries may name the same bytes (or overlap the table itself):
  // each is read as a snapshot, so that is no error.
  auto a = Entry(KVFS_OP_STAT), b = Entry(KVFS_OP_EXISTS);
  a.name_off = 10;
  a.name_len = 8;
  b.name_off = 14;
  b.name_len = 8;
  EXPECT_EQ(CheckNameInTable(a, 64), 0);
  EXPECT_EQ(CheckNameInTable(b, 64), 0);
}

TEST(BatchDecodeTest, DecodesEachOp) {
  EXPECT_EQ(DecodeEntry(Entry(KVFS_OP_STAT), "a").op, fs::BatchOp::kStat);
  EXPECT_EQ(DecodeEntry(Entry(KVFS_OP_EXISTS), "a").op, fs::BatchOp::kExists);
  EXPECT_EQ(DecodeEntry(Entry(KVFS_OP_PREFETCH), "a").op, fs::BatchOp::kPrefetch);
  DecodedEntry del = DecodeEntry(Entry(KVFS_OP_DELETE), "a");
  EXPECT_EQ(del.op, fs::BatchOp::kDelete);
  EXPECT_TRUE(del.changes_name);
  EXPECT_FALSE(del.needs_memory);
  DecodedEntry w = DecodeEntry(Entry(KVFS_OP_WRITE), "a");
  EXPECT_EQ(w.op, fs::BatchOp::kWrite);
  EXPECT_TRUE(w.changes_name);
  EXPECT_TRUE(w.needs_memory);
  auto empty = Entry(KVFS_OP_WRITE);
  empty.length = 0;
  EXPECT_FALSE(DecodeEntry(empty, "a").needs_memory) << "an empty file needs no memory";
  auto r = Entry(KVFS_OP_READ);
  r.file_off = 8192;
  DecodedEntry rd = DecodeEntry(r, "a");
  EXPECT_EQ(rd.op, fs::BatchOp::kRead);
  EXPECT_EQ(rd.file_off, 8192u);
  EXPECT_FALSE(rd.changes_name);
}

TEST(BatchDecodeTest, EntryFieldsOutOfRange) {
  EXPECT_EQ(DecodeEntry(Entry(KVFS_OP_STAT), std::string_view("a\0b", 3)).error, EINVAL);
  auto r = Entry(KVFS_OP_READ);
  r.length = 0;
  EXPECT_EQ(DecodeEntry(r, "a").error, EINVAL) << "a READ of nothing";
  r.length = 4096;
  r.file_off = static_cast<uint64_t>(INT64_MAX) - 4096;  // ends at INT64_MAX
  EXPECT_EQ(DecodeEntry(r, "a").error, 0);
  r.file_off += 1;
  EXPECT_EQ(DecodeEntry(r, "a").error, EINVAL) << "past the largest file offset";
  r.file_off = 0;
  r.length = KVFS_ENTRY_MAX_BYTES + 1;
  EXPECT_EQ(DecodeEntry(r, "a").error, EFBIG);
  auto w = Entry(KVFS_OP_WRITE);
  w.length = KVFS_ENTRY_MAX_BYTES;
  EXPECT_EQ(DecodeEntry(w, "a").error, 0);
  w.length = UINT64_MAX;
  EXPECT_EQ(DecodeEntry(w, "a").error, EFBIG);
}

TEST(BatchDecodeTest, MemoryPastItsRegion) {
  auto e = Entry(KVFS_OP_READ);
  e.buf_off = 4096;
  e.length = 4096;
  EXPECT_EQ(CheckRegisteredRange(e, 8192), 0);
  EXPECT_EQ(CheckRegisteredRange(e, 8191), EFAULT);
  e.buf_off = 8193;
  e.length = 0;
  EXPECT_EQ(CheckRegisteredRange(e, 8192), EFAULT) << "an offset past the region";
  e.buf_off = UINT64_MAX - 10;
  e.length = 100;
  EXPECT_EQ(CheckRegisteredRange(e, UINT64_MAX), EFAULT);
  EXPECT_EQ(CheckCallerRange(e), EFAULT) << "wraps past the address space";
  e.buf_off = 0x1000;
  EXPECT_EQ(CheckCallerRange(e), 0);
}

TEST(BatchDecodeTest, OnlyAlignedMemoryAndOffsetsMoveInPlace) {
  alignas(4096) static char page[8192];
  auto r = Entry(KVFS_OP_READ);
  EXPECT_TRUE(MovesInPlace(r, page));
  EXPECT_FALSE(MovesInPlace(r, page + 1));
  r.file_off = 512;
  EXPECT_FALSE(MovesInPlace(r, page)) << "a READ at an unaligned file offset bounces";
  auto w = Entry(KVFS_OP_WRITE);
  EXPECT_TRUE(MovesInPlace(w, page)) << "a WRITE has no file offset";
}

}  // namespace
}  // namespace kvfs::fuse
