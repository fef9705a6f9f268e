// Permission checks as the kernel makes them for path lookup, open(2),
// unlink(2) and friends (fs/namei.c: generic_permission(), may_delete()).
// The one copy of these rules in kvfs: the batch path uses them (it reaches
// files without the kernel walking the path), and so does the POSIX path
// of a mount without default_permissions (fuse/permissions.h), through
// fs/ operations that take the caller to check (Lookup, Open, OpenDir) or
// directly.
//
//   KVFS_RETURN_IF_ERROR(CheckAccess(dir_mode, dir_uid, dir_gid, caller, kMayExec));
//
// Pure functions of their arguments (Caller::in_group aside); safe from any
// thread.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "fs/file_system.h"

namespace kvfs::fs {

// Bits of `want` (the values of R_OK, W_OK, X_OK).
inline constexpr int kMayRead = 4;
inline constexpr int kMayWrite = 2;
inline constexpr int kMayExec = 1;

// The open flag the kernel adds for an exec open (FMODE_EXEC, as FUSE
// passes it in the open flags).
inline constexpr int kOpenForExec = 0x20;

// True if `gid` is the caller's primary group or one of its supplementary
// groups (Caller::in_group if set, else Caller::groups).
bool CallerInGroup(const Caller& caller, uint32_t gid);

// OK if `caller` may access an inode of `mode` (type and permission bits)
// owned by uid:gid as `want` asks, else EACCES. The owner class is used if
// the caller owns it, else the group class if it is in the group, else
// other (the first class that matches decides, as in the kernel); group
// membership is asked only when the group's and the others' bits differ on
// `want`. uid 0 passes every read and write check, and search of a
// directory; it may execute a non-directory only if some x bit is set.
Status CheckAccess(uint32_t mode, uint32_t uid, uint32_t gid, const Caller& caller, int want);

// What open(2) with `flags` asks of the file (may_open()): read and/or
// write by the access mode, write for O_TRUNC, execute for an exec open.
int WantOfOpen(int flags);

// The sticky-directory rule for removing or replacing an entry: in a
// directory with S_ISVTX only the owner of the entry's inode, the owner of
// the directory or uid 0 may do it; anyone else gets EPERM. OK otherwise.
// (Write and search permission on the directory are checked separately.)
Status CheckSticky(uint32_t dir_mode, uint32_t dir_uid, uint32_t victim_uid,
                   const Caller& caller);

}  // namespace kvfs::fs
