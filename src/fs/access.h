// Permission checks as the kernel makes them for path lookup, open(2),
// unlink(2), setattr and extended attributes (fs/namei.c:
// generic_permission(), may_create(), may_delete(); fs/attr.c:
// setattr_prepare(); fs/xattr.c: xattr_permission()). The one copy of these
// rules in kvfs: the batch path uses them (it reaches files without the
// kernel walking the path), and so does the POSIX path of a mount without
// default_permissions (fuse/permissions.h), through the fs/ calls that take
// the caller to check (`const Caller* check`, fs/file_system.h), which
// apply them under the locks of the operation itself.
//
//   KVFS_RETURN_IF_ERROR(CheckAccess(dir_mode, dir_uid, dir_gid, caller, kMayExec));
//
// Pure functions of their arguments (Caller::in_group aside); safe from any
// thread.
#pragma once

#include <cstdint>
#include <string_view>

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

// Whether everyone may search a directory of `mode` (all three x bits):
// the kernel may then cache names in it, as no walk through it needs a
// check of its caller.
constexpr bool EveryoneSearches(uint32_t mode) { return (mode & 0111) == 0111; }

// setattr_prepare()'s rules for `caller` asking `req` of an inode of
// `mode` owned by uid:gid, in this order: chown only by root, or by the
// owner to itself; chgrp by the owner (keeping the owner) to its own group
// or one it is in; chmod by the owner, or by a writer when it only clears
// S_ISUID/S_ISGID (the kernel computed that mode, after a write, a truncate
// or a chown by someone else); explicit times by the owner, both "now" also
// by a writer; a truncate without a handle (req.with_handle) by a writer.
// EPERM or EACCES. *chmod_mode (with req.mode) is the mode to set: req.mode
// without S_ISGID when a caller other than root, not in the file's (new)
// group, sets it itself.
Status CheckSetAttr(uint32_t mode, uint32_t uid, uint32_t gid, const SetAttrRequest& req,
                    const Caller& caller, uint32_t* chmod_mode);

// xattr_permission() for `name` (get: `write` false; set and remove: true)
// of an inode of `mode` owned by uid:gid: CheckUserXattr for a user.*
// name, else OK (trusted.* is the kernel's to check, for CAP_SYS_ADMIN;
// security.* and system.* are never stored).
Status CheckXattr(uint32_t mode, uint32_t uid, uint32_t gid, std::string_view name, bool write,
                  const Caller& caller);
// The user.* rules: only regular files and directories have them (get
// ENODATA, set EPERM); on a sticky directory only its owner or root sets
// them (EPERM); then read or write permission (EACCES).
Status CheckUserXattr(uint32_t mode, uint32_t uid, uint32_t gid, bool write,
                      const Caller& caller);

}  // namespace kvfs::fs
