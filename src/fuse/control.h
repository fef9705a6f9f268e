// The control directory MOUNT/.kvfs/: virtual files served by fuse/ alone
// (nothing of it is in the index).
//
//   stats       read: JSON statistics (fuse/stats_render.h StatsToJson)
//   metrics     read: Prometheus text (StatsToPrometheus)
//   drop_cache  write anything: FileSystem::DropCache()
//   prefetch    write names relative to the mount root, one per line:
//               ResolvePath + Prefetch each; a write fails with the errno
//               of the last of its names that failed, after trying them
//               all. A line may span writes (`cat list > prefetch` sends
//               the list in pieces cut anywhere): its start waits with the
//               handle, and close(2) ends a last line that has no newline
//               (and reports its failure)
//   sync        write anything: FileSystem::Sync()
//   evict       write a percent, 0 to 100 in decimal, with or without a
//               newline: FileSystem::Evict(percent), which unlinks least
//               recently used files now until at most that much of the
//               data space is used; the write returns once it has. Other
//               text is EINVAL and evicts nothing; with eviction off
//               (no -o evict=lru) the write fails with Evict's EINVAL
//
// Readable files are world-readable; the writable ones are root's and
// write-only (opening them for reading is EACCES).
//
// Its inodes come from a range the index never allocates (the index counts
// up from 2), so a request is for the control directory by inode number
// alone, or by the one name `.kvfs` in the root. The op table
// (fuse/route.h) routes those requests, once, to the control::* function
// of the same name and signature as the ops::* handler, which replies
// exactly once; the ops::* handlers never see a control inode.
//
// Handles: readable files carry a snapshot of their content, generated at
// open, so a reader sees one consistent document over several read()s;
// `prefetch` carries an unfinished line. The handle (fi->fh) names that
// state, owned by the kernel's open file and freed at Release.
//
// Thread safety: all functions may run concurrently on libfuse workers;
// the only shared state is the FileSystem (thread-safe).
#pragma once

#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include <cstdint>
#include <limits>
#include <string_view>

#include "common/status.h"

namespace kvfs::fuse::control {

static_assert(sizeof(fuse_ino_t) == 8, "control inodes need 64-bit inode numbers");

// The name of the control directory in the root.
inline constexpr std::string_view kDirName = ".kvfs";

// Far above anything the index's counter can reach (it starts at 2 and
// counts one per created inode).
inline constexpr fuse_ino_t kFirstIno = std::numeric_limits<uint64_t>::max() / 2;
inline constexpr fuse_ino_t kDirIno = kFirstIno;
inline constexpr fuse_ino_t kLastIno = kFirstIno + 6;  // the dir and its 6 files

// True for the control directory and its files.
inline bool Owns(fuse_ino_t ino) { return ino >= kFirstIno && ino <= kLastIno; }
// True when `name` in `parent` is the control directory itself.
inline bool IsControlName(fuse_ino_t parent, const char* name) {
  return parent == FUSE_ROOT_ID && name != nullptr && kDirName == name;
}

// Whether a namespace change naming `name` in `parent` touches the control
// directory: EPERM inside it (it is fixed), `exists_errno` for its own name
// in the root (EEXIST for creating it, EPERM for removing or renaming it);
// OK when it does not.
Status RefuseNameChange(fuse_ino_t parent, const char* name, int exists_errno);

// Handlers for Owns(ino) (or, for Lookup, Owns(parent) or IsControlName),
// with the signatures of the ops::* handlers. Each replies exactly once.
// Lookup of `.kvfs` in the root checks search permission on the root
// (fuse/permissions.h) and gets no entry timeout when not everyone may
// search it.
void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
// Control inodes are not counted: nothing to forget.
void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
// access(2): the nodes' modes, as the kernel's own check saw them.
void Access(fuse_req_t req, fuse_ino_t ino, int mask);
// Only size changes are accepted (and ignored: `echo 1 > f` truncates);
// anything else is EPERM.
void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi);
// EPERM: kvfs has no hard links, and the control files are fixed.
void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent, const char* new_name);
void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
           fuse_file_info* fi);
void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
// No extended attributes: the list is empty.
void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size);
// The rest is answered by an errno alone (fuse/route.cc): fsync, fsyncdir
// and releasedir OK (nothing to make durable or to free), fallocate EPERM
// (no space), ioctl ENOTTY, setxattr EOPNOTSUPP, getxattr and removexattr
// ENODATA.

// The attribute name whose setxattr prefetches a file or directory.
inline constexpr std::string_view kPrefetchXattr = "user.kvfs.prefetch";

}  // namespace kvfs::fuse::control
