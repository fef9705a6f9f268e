#include "fuse/batch_decode.h"

#include <climits>
#include <cstdint>

namespace kvfs::fuse {

Refusal CheckBatchArgs(const kvfs_batch_args& args, size_t out_bytes, bool dir) {
  if (out_bytes < sizeof(args)) return {EINVAL, "no room for the reply"};
  if (args.flags != 0) return {EINVAL, "flags must be 0"};
  if (args.count == 0) return {EINVAL, "count is 0"};
  if (args.count > KVFS_BATCH_MAX_ENTRIES) {
    return {E2BIG, std::to_string(args.count) + " entries, at most " +
                       std::to_string(KVFS_BATCH_MAX_ENTRIES)};
  }
  if (!dir) return {ENOTDIR, "the ioctl fd is not a directory"};
  if (args.table_off % 8 != 0) return {EINVAL, "table_off is not 8-byte aligned"};
  return {};
}

int CheckEntryHeader(const kvfs_batch_entry& e) {
  if (e.op < KVFS_OP_READ || e.op > KVFS_OP_EXISTS || e.flags != 0 ||
      (e.op != KVFS_OP_READ && e.file_off != 0)) {
    return EINVAL;
  }
  if (e.name_len == 0) return EINVAL;
  if (e.name_len > KVFS_PATH_MAX) return ENAMETOOLONG;
  return 0;
}

int CheckNameInTable(const kvfs_batch_entry& e, uint64_t table_bytes) {
  return Inside(e.name_off, e.name_len, table_bytes) ? 0 : EFAULT;
}

DecodedEntry DecodeEntry(const kvfs_batch_entry& e, std::string_view name) {
  DecodedEntry d;
  if (name.find('\0') != std::string_view::npos) {
    d.error = EINVAL;
    return d;
  }
  d.changes_name = e.op == KVFS_OP_WRITE || e.op == KVFS_OP_DELETE;
  switch (e.op) {
    case KVFS_OP_STAT: d.op = fs::BatchOp::kStat; return d;
    case KVFS_OP_EXISTS: d.op = fs::BatchOp::kExists; return d;
    case KVFS_OP_PREFETCH: d.op = fs::BatchOp::kPrefetch; return d;
    case KVFS_OP_DELETE: d.op = fs::BatchOp::kDelete; return d;
    default: break;
  }
  if (e.length > KVFS_ENTRY_MAX_BYTES) {
    d.error = EFBIG;
    return d;
  }
  if (e.op == KVFS_OP_READ) {
    d.op = fs::BatchOp::kRead;
    if (e.length == 0 || e.file_off > static_cast<uint64_t>(INT64_MAX) - e.length) {
      d.error = EINVAL;
      return d;
    }
    d.file_off = e.file_off;
    d.needs_memory = true;
    return d;
  }
  d.op = fs::BatchOp::kWrite;
  d.needs_memory = e.length > 0;  // an empty file: no memory
  return d;
}

int CheckRegisteredRange(const kvfs_batch_entry& e, uint64_t region_bytes) {
  return Inside(e.buf_off, e.length, region_bytes) ? 0 : EFAULT;
}

int CheckCallerRange(const kvfs_batch_entry& e) {
  return e.buf_off > UINT64_MAX - e.length ? EFAULT : 0;
}

bool MovesInPlace(const kvfs_batch_entry& e, const void* data, uint64_t page) {
  return reinterpret_cast<uintptr_t>(data) % page == 0 &&
         (e.op != KVFS_OP_READ || e.file_off % page == 0);
}

}  // namespace kvfs::fuse
