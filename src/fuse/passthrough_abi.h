// The kernel's ABI for FUSE passthrough, which Debian 12's <linux/fuse.h>
// (protocol 7.38) and libfuse 3.14 predate. Copied in meaning, not text,
// from Linux 6.9's include/uapi/linux/fuse.h (protocol 7.40), where it first
// appeared, and checked against the 6.18 kernel this project runs on;
// Documentation/filesystems/fuse-passthrough.rst describes it.
//
// INIT: the daemon accepts FUSE_PASSTHROUGH and says how deep backing files
// may stack (fuse_init_out's first word after flags2). A backing file is
// registered on /dev/fuse (BACKING_OPEN: its fd in, an id out); an OPEN
// reply with FOPEN_PASSTHROUGH and that id (fuse_open_out's third word)
// makes the kernel serve the open's reads, writes and maps from it.
#pragma once

#include <sys/ioctl.h>

#include <cstddef>
#include <cstdint>

namespace kvfs::fuse::passthrough_abi {

// FUSE_INIT flag, bit 37 (flags2 bit 5).
inline constexpr uint64_t kPassthrough = 1ULL << 37;
// The kernel refuses passthrough with a writeback cache (bit 16).
inline constexpr uint64_t kWritebackCache = 1ULL << 16;
// fuse_init_out: max_stack_depth is the 32-bit word after flags2, at this
// byte offset (major, minor, max_readahead, flags, max_background +
// congestion_threshold, max_write, time_gran, max_pages + map_alignment,
// flags2).
inline constexpr size_t kMaxStackDepthOffset = 36;
// A memfd stacks on nothing: depth 1 is enough.
inline constexpr uint32_t kMaxStackDepth = 1;

// fuse_open_out.open_flags
inline constexpr uint32_t kFopenPassthrough = 1u << 7;
inline constexpr uint32_t kFopenNoflush = 1u << 5;

struct OpenOut {  // fuse_open_out, 7.40
  uint64_t fh;
  uint32_t open_flags;
  int32_t backing_id;
};
static_assert(sizeof(OpenOut) == 16);

struct BackingMap {  // fuse_backing_map
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};

inline constexpr unsigned long kBackingOpen = _IOW(229, 1, BackingMap);
inline constexpr unsigned long kBackingClose = _IOW(229, 2, uint32_t);

}  // namespace kvfs::fuse::passthrough_abi
