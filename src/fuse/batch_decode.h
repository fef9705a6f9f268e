// Decoding KVFS_IOC_BATCH (include/kvfs/ioctl.h): what the call's args and
// each entry of its table ask for, checked against the ABI, and the answer
// to KVFS_IOC_FEATURES, read from the same table of ops. Pure: no
// memory of the caller is touched, no fs/ call is made; the ioctl front
// (batch_ioctl.cc) reads the table and names, maps the memory and runs the
// entries. Every check here answers with the errno kvfs_ioctl(7) lists.
//
// Thread safety: stateless functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fs/batch.h"
#include "kvfs/ioctl.h"

namespace kvfs::fuse {

// Whether [off, off + len) lies inside [0, size), without overflow.
constexpr bool Inside(uint64_t off, uint64_t len, uint64_t size) {
  return off <= size && len <= size - off;
}

// The batch ops this daemon runs, one row per enum kvfs_op: which ops are
// known, what each decodes to and what its fields mean are read from here,
// and so is the op set KVFS_IOC_FEATURES reports. A new op is a row here,
// its fs::BatchOp, and its value in include/kvfs/ioctl.h.
struct OpRule {
  uint32_t abi;         // enum kvfs_op
  fs::BatchOp op;
  bool moves_data;      // buf_id/buf_off/length name memory (READ, WRITE)
  bool takes_file_off;  // file_off may be non-zero (READ)
  bool changes_name;    // the kernel's cached entry of the name must go
};

// The row of `abi`, or nullptr for an op this daemon does not run.
const OpRule* FindOp(uint32_t abi);

// KVFS_OP_BIT of every row.
uint64_t SupportedOps();

// A refusal of the whole call: 0, or the errno and why.
struct Refusal {
  int error = 0;
  std::string why;
};

// The args of a BATCH call (version checked before): EINVAL for no room
// for the reply (`out_bytes`), flags, a count of 0 or a table_off that is
// not 8-byte aligned; E2BIG past KVFS_BATCH_MAX_ENTRIES; ENOTDIR when the
// ioctl fd is not a directory (`dir`).
Refusal CheckBatchArgs(const kvfs_batch_args& args, size_t out_bytes, bool dir);

// The args of a FEATURES call: EINVAL for no room for the reply, flags
// or reserved not 0. Any version is taken: the call is how a client
// learns the daemon's. On success `*out` is the answer.
Refusal AnswerFeatures(const kvfs_features_args& in, size_t out_bytes, kvfs_features_args* out);

// The entry's header alone, before its name is read: EINVAL for an
// unknown op, flags, a file_off on an op other than READ, an empty name;
// ENAMETOOLONG for a name over KVFS_PATH_MAX. 0 when it may go on.
int CheckEntryHeader(const kvfs_batch_entry& e);

// Where a name in a registered table lies: 0, or EFAULT when
// [name_off, name_off + name_len) is not inside its `table_bytes`.
int CheckNameInTable(const kvfs_batch_entry& e, uint64_t table_bytes);

// What an entry with a valid header and name `name` asks.
struct DecodedEntry {
  int error = 0;                      // EINVAL (NUL in the name, READ range), EFBIG
  fs::BatchOp op = fs::BatchOp::kStat;
  uint64_t file_off = 0;              // kRead
  bool needs_memory = false;          // READ, or WRITE of length > 0: buf_id/buf_off name it
  bool changes_name = false;          // WRITE/DELETE: the kernel's cached entry must go
};
DecodedEntry DecodeEntry(const kvfs_batch_entry& e, std::string_view name);

// The memory of an entry that needs_memory: in a registration of
// `region_bytes` (buf_id != 0): 0 or EFAULT when [buf_off, buf_off +
// length) is not inside; in the caller's address space (buf_id == 0):
// 0 or EFAULT when the range wraps past the end of the address space.
int CheckRegisteredRange(const kvfs_batch_entry& e, uint64_t region_bytes);
int CheckCallerRange(const kvfs_batch_entry& e);

// Whether a registered-memory entry moves data between the device and
// `data` with no bounce (then it costs the byte bound nothing): its
// address and, for a READ, its file offset are `page`-aligned.
bool MovesInPlace(const kvfs_batch_entry& e, const void* data, uint64_t page = 4096);

}  // namespace kvfs::fuse
