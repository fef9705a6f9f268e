// The FUSE requests kvfs handles, a row per opcode: the fs/ call the
// request runs, whose rules (fs/calls.h: whether it may wait) decide where
// it runs, or, for a request that runs no fs/ call, how it is admitted.
//
// RequestLoop::RunsInReceiver (fuse/request_loop.h) reads this table for
// both transports (the /dev/fuse loop and the io_uring queues): a request
// whose call never waits runs on the thread that received it, one whose
// call may wait goes to a worker, one whose call decides per request is
// tried there without waiting and handed to a worker only if the call says
// it would wait (fs/calls.h, RequestLoop::HandOff). Two rules of the
// transport's own sit
// on top, both about copies rather than waits: a READ over 256 KiB goes to
// a worker (the reply's copy into the caller's pages costs ~100 us per
// MiB, and workers copy the kernel's 1 MiB pieces in parallel), and so
// does a WRITE that arrived while others were waiting. An opcode with no
// row goes to a worker, where libfuse answers it (ENOSYS).
//
// Thread safety: constant data; any thread.
#pragma once

#include <linux/fuse.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "fs/calls.h"

namespace kvfs::fuse {

// How a request is admitted to the receiving thread.
enum class Admit : uint8_t {
  kByCall,  // by its call's wait rule (fs/calls.h)
  kAtOnce,  // runs no fs/ call that can wait: answered where it arrives
  kIoctl,   // by command: kvfs's own (fuse/batch_ioctl.cc) go to a worker,
            // since REGISTER opens the caller's file through /proc and that
            // file may be on this mount, whose OPEN the receiver must be
            // free to read; any other command gets ENOTTY at once
};

struct OpcodeRule {
  uint32_t opcode;
  std::optional<fs::Call> call;  // set for kByCall
  Admit admit = Admit::kByCall;
};

inline constexpr OpcodeRule kOpcodes[] = {
    {FUSE_LOOKUP, fs::Call::kLookup},
    {FUSE_FORGET, fs::Call::kForget},
    {FUSE_BATCH_FORGET, fs::Call::kForget},
    {FUSE_GETATTR, fs::Call::kGetAttr},
    {FUSE_SETATTR, fs::Call::kSetAttr},
    // Without default_permissions only: the kernel sends none otherwise.
    {FUSE_ACCESS, fs::Call::kAccess},
    {FUSE_MKDIR, fs::Call::kMkDir},
    // A regular file only: create then release.
    {FUSE_MKNOD, fs::Call::kCreate},
    {FUSE_RMDIR, fs::Call::kRmDir},
    {FUSE_UNLINK, fs::Call::kUnlink},
    {FUSE_RENAME, fs::Call::kRename},
    {FUSE_RENAME2, fs::Call::kRename},
    {FUSE_LINK, fs::Call::kLink},
    // Refused with EPERM: kvfs has no symbolic links.
    {FUSE_SYMLINK, std::nullopt, Admit::kAtOnce},
    {FUSE_CREATE, fs::Call::kCreate},
    // Rewritten into a CREATE before it is admitted (fuse/tmpfile.h).
    {FUSE_TMPFILE, fs::Call::kCreate},
    {FUSE_OPEN, fs::Call::kOpen},
    {FUSE_READ, fs::Call::kRead},
    {FUSE_WRITE, fs::Call::kWrite},
    {FUSE_FLUSH, fs::Call::kFlush},
    {FUSE_RELEASE, fs::Call::kRelease},
    {FUSE_FSYNC, fs::Call::kFsync},
    {FUSE_FALLOCATE, fs::Call::kFallocate},
    {FUSE_OPENDIR, fs::Call::kOpenDir},
    {FUSE_READDIR, fs::Call::kReadDir},
    {FUSE_RELEASEDIR, fs::Call::kReleaseDir},
    {FUSE_FSYNCDIR, fs::Call::kSync},
    {FUSE_STATFS, fs::Call::kStatFs},
    {FUSE_GETXATTR, fs::Call::kGetXattr},
    {FUSE_LISTXATTR, fs::Call::kListXattr},
    {FUSE_SETXATTR, fs::Call::kSetXattr},
    {FUSE_REMOVEXATTR, fs::Call::kRemoveXattr},
    {FUSE_IOCTL, std::nullopt, Admit::kIoctl},
    {FUSE_INIT, std::nullopt, Admit::kAtOnce},
    {FUSE_DESTROY, std::nullopt, Admit::kAtOnce},
    {FUSE_INTERRUPT, std::nullopt, Admit::kAtOnce},
};

namespace opcodes_internal {
// Opcodes below this have a slot in the index (FUSE's run to 52).
inline constexpr uint32_t kSlots = 64;
constexpr std::array<int8_t, kSlots> MakeIndex() {
  std::array<int8_t, kSlots> index{};
  index.fill(-1);
  for (size_t i = 0; i < std::size(kOpcodes); ++i) {
    index[kOpcodes[i].opcode] = static_cast<int8_t>(i);
  }
  return index;
}
inline constexpr std::array<int8_t, kSlots> kIndex = MakeIndex();

constexpr bool RowsConsistent() {
  for (size_t i = 0; i < std::size(kOpcodes); ++i) {
    const OpcodeRule& r = kOpcodes[i];
    if (r.opcode >= kSlots || kIndex[r.opcode] != static_cast<int8_t>(i)) return false;
    if (r.call.has_value() != (r.admit == Admit::kByCall)) return false;
  }
  return true;
}
static_assert(RowsConsistent(),
              "kOpcodes: one row per opcode, each below kSlots; a call exactly on kByCall rows");
}  // namespace opcodes_internal

// The row of `opcode`, or null if kvfs does not handle it.
constexpr const OpcodeRule* OpcodeRuleOf(uint32_t opcode) {
  if (opcode >= opcodes_internal::kSlots) return nullptr;
  const int8_t i = opcodes_internal::kIndex[opcode];
  return i < 0 ? nullptr : &kOpcodes[i];
}

}  // namespace kvfs::fuse
