#include "fuse/batch_decode.h"

#include <algorithm>
#include <climits>
#include <cstdint>

namespace kvfs::fuse {

namespace {

constexpr OpRule kOps[] = {
    // abi               op                      data   file_off name
    {KVFS_OP_READ,     fs::BatchOp::kRead,     true,  true,  false},
    {KVFS_OP_WRITE,    fs::BatchOp::kWrite,    true,  false, true},
    {KVFS_OP_STAT,     fs::BatchOp::kStat,     false, false, false},
    {KVFS_OP_PREFETCH, fs::BatchOp::kPrefetch, false, false, false},
    {KVFS_OP_DELETE,   fs::BatchOp::kDelete,   false, false, true},
    {KVFS_OP_EXISTS,   fs::BatchOp::kExists,   false, false, false},
};
// KVFS_OP_BIT shifts a 64-bit word.
static_assert(std::ranges::all_of(kOps, [](const OpRule& r) { return r.abi > 0 && r.abi < 64; }));

}  // namespace

const OpRule* FindOp(uint32_t abi) {
  for (const OpRule& r : kOps) {
    if (r.abi == abi) return &r;
  }
  return nullptr;
}

uint64_t SupportedOps() {
  uint64_t bits = 0;
  for (const OpRule& r : kOps) bits |= KVFS_OP_BIT(r.abi);
  return bits;
}

Refusal AnswerFeatures(const kvfs_features_args& in, size_t out_bytes, kvfs_features_args* out) {
  if (out_bytes < sizeof(in)) return {EINVAL, "no room for the reply"};
  if (in.flags != 0 || in.reserved != 0) return {EINVAL, "flags and reserved must be 0"};
  *out = kvfs_features_args{};
  out->version = KVFS_ABI_VERSION;
  out->ops = SupportedOps();
  return {};
}

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
  const OpRule* rule = FindOp(e.op);
  if (rule == nullptr || e.flags != 0 || (!rule->takes_file_off && e.file_off != 0)) {
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
  const OpRule* rule = FindOp(e.op);
  if (rule == nullptr) {  // CheckEntryHeader refused it already
    d.error = EINVAL;
    return d;
  }
  d.op = rule->op;
  d.changes_name = rule->changes_name;
  if (!rule->moves_data) return d;
  if (e.length > KVFS_ENTRY_MAX_BYTES) {
    d.error = EFBIG;
    return d;
  }
  if (rule->takes_file_off) {
    if (e.length == 0 || e.file_off > static_cast<uint64_t>(INT64_MAX) - e.length) {
      d.error = EINVAL;  // a read of nothing, or past the largest offset
      return d;
    }
    d.file_off = e.file_off;
  }
  d.needs_memory = e.length > 0;  // WRITE of an empty file: no memory
  return d;
}

int CheckRegisteredRange(const kvfs_batch_entry& e, uint64_t region_bytes) {
  return Inside(e.buf_off, e.length, region_bytes) ? 0 : EFAULT;
}

int CheckCallerRange(const kvfs_batch_entry& e) {
  return e.buf_off > UINT64_MAX - e.length ? EFAULT : 0;
}

bool MovesInPlace(const kvfs_batch_entry& e, const void* data, uint64_t page) {
  return reinterpret_cast<uintptr_t>(data) % page == 0 && e.file_off % page == 0;
}

}  // namespace kvfs::fuse
