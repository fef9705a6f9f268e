// The calls of FileSystem (fs/file_system.h) and the rules that hold per
// call, each stated once here:
//
//   changes   the call makes a change: once a commit has failed (the index
//             or a device flush before a commit), FileSystem refuses it
//             with EROFS before it starts (FileSystem::Impl::Writable()).
//             Open is gated only when it writes or truncates (OpenChanges).
//   op        the latency/error metric it is recorded under (fs/stats.h),
//             or none.
//   may_wait  the call may wait for something slow: device I/O, a commit,
//             staging memory, or a namespace lock held across a batch's
//             run (a whole-file call holds it for one path walk at most).
//             A caller that must never wait (fuse/'s request receiver, the
//             io_uring queues) runs only calls with may_wait false itself
//             and hands the others to a worker. The calls with may_wait
//             false wait at most for short critical sections (an inode's
//             mutex, the table's) and for index reads of names and inodes
//             not yet in memory, as a lookup must; they never wait on a
//             lock that a batch run holds for more than one name.
//             Write is may_wait unless WriteMayWait() says otherwise for
//             the write at hand (callers ask per write); Read of a small
//             range completes asynchronously and returns at once.
//
// How a transport uses it:
//
//   if (!fs::CallMayWait(fs::Call::kRelease)) RunHere(req); else HandOff(req);
//
// The table is constexpr: asking costs nothing at run time.
#pragma once

#include <fcntl.h>

#include <cstdint>

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
  kCount
};

struct CallRules {
  bool changes = false;
  bool may_wait = false;
};

constexpr CallRules RulesOf(Call c) {
  switch (c) {
    case Call::kLookup:
    case Call::kForget:
    case Call::kGetAttr:
    case Call::kOpenDir:
    case Call::kReadDir:
    case Call::kReleaseDir:
    case Call::kStatFs:
    case Call::kGetXattr:
    case Call::kListXattr:
      return {false, false};
    // Flush and Release start write-behind (queued, not waited for);
    // Release of an unlinked file's last handle queues its delete. Fsync
    // returns at once and calls back when durable.
    case Call::kFlush:
    case Call::kRelease:
    case Call::kFsync:
      return {false, false};
    // Namespace changes: applied in memory under the namespace lock and
    // queued for the index; the lock's holders are other namespace calls
    // and batch walks (at most one path each).
    case Call::kMkDir:
    case Call::kRmDir:
    case Call::kUnlink:
    case Call::kRename:
    case Call::kCreate:
    case Call::kLink:
      return {true, false};
    // Changes only with OpenChanges(flags); O_TRUNC to 0 stages nothing.
    case Call::kOpen:
      return {false, false};
    // The prefetch hint may load a directory's files from the index.
    case Call::kSetXattr:
    case Call::kRemoveXattr:
      return {true, true};
    // A truncate may read the chunk its cut falls in from the device.
    case Call::kSetAttr:
      return {true, true};
    case Call::kRead:
      return {false, false};
    case Call::kWrite:
    case Call::kFallocate:
      return {true, true};
    case Call::kPrefetch:
    case Call::kDropCache:
    case Call::kSync:
      return {false, true};
    case Call::kLookupPath:
    case Call::kExistsPath:
    case Call::kReadFile:
    case Call::kPrefetchFile:
      return {false, true};
    case Call::kWriteFile:
    case Call::kDeleteFile:
      return {true, true};
    case Call::kCount:
      break;
  }
  return {false, true};
}

// Whether `c` may wait for something slow (see above).
constexpr bool CallMayWait(Call c) { return RulesOf(c).may_wait; }
// Whether `c` is refused with EROFS after a failed commit.
constexpr bool CallChanges(Call c) { return RulesOf(c).changes; }
// Open changes the file only when it may write or truncates.
constexpr bool OpenChanges(int flags) {
  return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC) != 0;
}

}  // namespace kvfs::fs
