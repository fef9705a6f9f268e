// The calls of FileSystem (fs/file_system.h) and the rules that hold per
// call: one table, kCallRules, a row per call. Who uses which column:
//
//   changes   FileSystem refuses the call with EROFS before it starts once a
//             commit has failed (the index, or a device flush before a
//             commit): FileSystem::Impl::Writable(). Open is gated only when
//             it writes or truncates (OpenChanges).
//   wait      whether the call may wait for something slow: device I/O, a
//             commit, staging memory, a namespace lock held across a
//             batch's run (a whole-file call holds it for one path walk at
//             most), or work that grows with the data (a whole directory's
//             listing). A thread that must never wait (fuse/'s request
//             receiver and io_uring queues) runs itself only the calls that
//             never wait and hands the others to a worker: fuse/opcodes.h
//             maps each FUSE request to its call. kNever calls wait at most
//             for short critical sections (an inode's mutex, the table's)
//             and for index reads of names and inodes not yet in memory, as
//             a lookup must; Read returns at once and replies from the
//             completion. kAsk: the call takes `may_wait`; false makes
//             it try without waiting and, where it would wait, return
//             kWouldWait having changed nothing a second run would not
//             redo the same (a write that finds staging memory free only
//             copies; a flush, release or fsync writes out only a file the
//             kernel wrote through served memory). The caller then runs it
//             again where it may wait (fuse/'s receiver hands it to a
//             worker): one decision, in the call, under the locks it takes.
//   metric    the latency/error metric FileSystem records the call under
//             (fs/stats.h), or none; `answer` is an errno that is an
//             outcome rather than an error, not counted as one.
//
// The table is constexpr: asking costs nothing at run time.
#pragma once

#include <fcntl.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "fs/stats.h"

namespace kvfs::fs {

enum class Call : uint8_t {
  kLookup,
  kForget,
  kGetAttr,
  kSetAttr,
  kMkDir,
  kRmDir,
  kUnlink,
  kRename,
  kCreate,
  kOpen,
  kRead,
  kWrite,
  kFlush,
  kRelease,
  kFsync,
  kFallocate,
  kOpenDir,
  kReadDir,
  kReleaseDir,
  kStatFs,
  kGetXattr,
  kListXattr,
  kSetXattr,
  kRemoveXattr,
  kPrefetch,      // Prefetch(ino) and ResolvePath (hints)
  kDropCache,
  kSync,          // Sync(), FlushAll()
  kLookupPath,    // the batch ioctl's whole-file calls
  kExistsPath,
  kReadFile,
  kWriteFile,
  kDeleteFile,
  kPrefetchFile,
  kLink,          // the link that names an unnamed (O_TMPFILE) file
  kAccess,        // access(2) of a mount that leaves permission checks to kvfs
  kCount
};

enum class Wait : uint8_t { kNever, kMay, kAsk };

// What a call of Wait::kAsk returns, run with may_wait false, where it
// would wait.
inline constexpr int kWouldWait = EWOULDBLOCK;

struct CallRules {
  Call call;
  std::string_view name;
  bool changes;
  Wait wait;
  std::optional<Op> metric;
  int answer = 0;
};

inline constexpr CallRules kCallRules[] = {
    // A lookup's ENOENT is the answer "no such key".
    {Call::kLookup, "lookup", false, Wait::kNever, Op::kLookup, ENOENT},
    {Call::kForget, "forget", false, Wait::kNever, std::nullopt},
    {Call::kGetAttr, "getattr", false, Wait::kNever, Op::kGetattr},
    // A truncate may read the chunk its cut falls in from the device.
    {Call::kSetAttr, "setattr", true, Wait::kMay, std::nullopt},
    // Namespace changes: applied in memory under the namespace lock and
    // queued for the index; the lock's holders are other namespace calls
    // and batch walks (at most one path each).
    {Call::kMkDir, "mkdir", true, Wait::kNever, std::nullopt},
    {Call::kRmDir, "rmdir", true, Wait::kNever, std::nullopt},
    {Call::kUnlink, "unlink", true, Wait::kNever, Op::kUnlink},
    {Call::kRename, "rename", true, Wait::kNever, Op::kRename},
    {Call::kCreate, "create", true, Wait::kNever, Op::kCreate},
    // Changes only with OpenChanges(flags); O_TRUNC to 0 stages nothing.
    // ESTALE: an open that raced a rename-over; the kernel looks again.
    {Call::kOpen, "open", false, Wait::kNever, Op::kOpen, ESTALE},
    {Call::kRead, "read", false, Wait::kNever, Op::kRead},
    {Call::kWrite, "write", true, Wait::kAsk, Op::kWrite},
    // Flush and Release start write-behind (queued, not waited for);
    // Release of an unlinked file's last handle queues its delete. Fsync
    // returns at once and calls back when durable.
    {Call::kFlush, "flush", false, Wait::kAsk, std::nullopt},
    {Call::kRelease, "release", false, Wait::kAsk, std::nullopt},
    {Call::kFsync, "fsync", false, Wait::kAsk, Op::kFsync},
    {Call::kFallocate, "fallocate", true, Wait::kMay, std::nullopt},
    {Call::kOpenDir, "opendir", false, Wait::kNever, std::nullopt},
    // The first read of a listing lists the whole directory from the index.
    {Call::kReadDir, "readdir", false, Wait::kMay, std::nullopt},
    {Call::kReleaseDir, "releasedir", false, Wait::kNever, std::nullopt},
    {Call::kStatFs, "statfs", false, Wait::kNever, std::nullopt},
    {Call::kGetXattr, "getxattr", false, Wait::kNever, std::nullopt},
    {Call::kListXattr, "listxattr", false, Wait::kNever, std::nullopt},
    // The prefetch hint may load a directory's files from the index.
    {Call::kSetXattr, "setxattr", true, Wait::kMay, std::nullopt},
    {Call::kRemoveXattr, "removexattr", true, Wait::kMay, std::nullopt},
    {Call::kPrefetch, "prefetch", false, Wait::kMay, std::nullopt},
    {Call::kDropCache, "drop_cache", false, Wait::kMay, std::nullopt},
    {Call::kSync, "sync", false, Wait::kMay, std::nullopt},
    {Call::kLookupPath, "lookup_path", false, Wait::kMay, std::nullopt},
    {Call::kExistsPath, "exists_path", false, Wait::kMay, std::nullopt},
    {Call::kReadFile, "read_file", false, Wait::kMay, Op::kRead},
    {Call::kWriteFile, "write_file", true, Wait::kMay, Op::kWrite},
    {Call::kDeleteFile, "delete_file", true, Wait::kMay, std::nullopt},
    {Call::kPrefetchFile, "prefetch_file", false, Wait::kMay, std::nullopt},
    {Call::kLink, "link", true, Wait::kNever, std::nullopt},
    {Call::kAccess, "access", false, Wait::kNever, std::nullopt},
};

// A row per call, in the enum's order, so that RulesOf is an index.
constexpr bool CallRulesInOrder() {
  if (std::size(kCallRules) != static_cast<size_t>(Call::kCount)) return false;
  for (size_t i = 0; i < std::size(kCallRules); ++i) {
    if (static_cast<size_t>(kCallRules[i].call) != i) return false;
  }
  return true;
}
static_assert(CallRulesInOrder(), "kCallRules: one row per Call, in the enum's order");

constexpr const CallRules& RulesOf(Call c) { return kCallRules[static_cast<size_t>(c)]; }

// Open changes the file only when it may write or truncates.
constexpr bool OpenChanges(int flags) {
  return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC) != 0;
}

}  // namespace kvfs::fs
