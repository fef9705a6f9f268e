// The kernel's ABI for FUSE over io_uring, which Debian 12's <linux/fuse.h>
// (protocol 7.38) predates. Copied in meaning, not text, from Linux 6.14's
// include/uapi/linux/fuse.h (protocol 7.42), where the transport first
// appeared, and checked against the 6.18 kernel this project runs on;
// Documentation/filesystems/fuse-io-uring.rst describes it.
//
// A ring entry is two buffers the daemon owns: a header (fuse_uring_req_header)
// and a payload. For a request, the kernel writes the fuse_in_header to
// in_out, the opcode's first argument (fuse_read_in, fuse_write_in, ... or
// nothing, e.g. for LOOKUP) to op_in, and the remaining arguments (a name, a
// write's data) to the payload, with their size in ring_ent_in_out.payload_sz.
// For the reply, the daemon writes the fuse_out_header to in_out and the
// reply's body to the payload, sets payload_sz, and sends COMMIT_AND_FETCH
// with the request's commit_id, which also hands the entry back for the next
// request.
#pragma once

#include <cstdint>

namespace kvfs::fuse::uring_abi {

// FUSE_INIT flag (bit 41: the second word, flags2, bit 9): the kernel offers
// it when /sys/module/fuse/parameters/enable_uring is Y; the daemon accepts
// by setting it in its reply.
inline constexpr uint64_t kOverIoUring = 1ULL << 41;
inline constexpr uint32_t kInitExt = 1u << 30;  // FUSE_INIT_EXT: flags2 is valid

inline constexpr unsigned kInOutHeaderBytes = 128;
inline constexpr unsigned kOpInBytes = 128;

struct EntInOut {
  uint64_t flags;
  uint64_t commit_id;    // the request's unique id, to be sent back with the reply
  uint32_t payload_sz;   // bytes used in the payload buffer
  uint32_t padding;
  uint64_t reserved;
};

struct ReqHeader {
  char in_out[kInOutHeaderBytes];  // fuse_in_header, then fuse_out_header
  char op_in[kOpInBytes];          // the opcode's first argument
  EntInOut ring_ent_in_out;
};

// IORING_OP_URING_CMD's cmd_op.
enum Cmd : uint32_t {
  kCmdRegister = 1,        // addr/len: iovec[2] {header, payload}
  kCmdCommitAndFetch = 2,  // the same iovecs; commit_id of the request replied to
};

// In the SQE's command area (an SQE128 ring).
struct CmdReq {
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;  // the queue (CPU) the entry belongs to
  uint8_t padding[6];
};

static_assert(sizeof(EntInOut) == 32);
static_assert(sizeof(ReqHeader) == 288);
static_assert(sizeof(CmdReq) == 24);

}  // namespace kvfs::fuse::uring_abi
