// Permission checks of the POSIX path, made by kvfs instead of the kernel.
//
// A mount with `default_permissions` has the kernel check mode bits against
// its cached attributes, which it must then fetch again (a GETATTR of the
// directory) after every create, rename and unlink in it: two of a store's
// ten requests. Without the option the kernel checks nothing but execute
// bits of regular files, and these functions make the checks
// generic_permission(), may_create(), may_delete(), may_open(),
// setattr_prepare() and xattr_permission() made (fs/namei.c, fs/attr.c,
// fs/xattr.c), with kvfs's current attributes, for the caller of the
// request (uid, gid, and its supplementary groups, read from /proc only
// when they decide the answer). The rules themselves are fs/access.h's; the
// checks of a lookup and an open are made by the fs/ call itself, which
// takes the caller (RequestCaller::check()), in the same hold of the
// inode's lock as the operation.
//
// Path walks: the kernel walks cached names without asking, so a directory
// whose search permission not everyone has (mode without all three x bits)
// gets its names cached for no time (EntryTimeoutFor): every walk through it
// comes as a LOOKUP, which checks search permission. When a directory loses
// an x bit, or a name moves into such a directory, every cached name of the
// mount is dropped (FUSE_NOTIFY_INC_EPOCH, Linux 6.16+), so no walk uses a
// name cached before.
//
//   if (Denied(req, perm::MayCreate(req, parent), "create")) return;
//
// Every function returns OK when the mount leaves the checks to the kernel
// (SessionState::kvfs_permissions false). The control directory's inodes
// never come here (fuse/route.h); its handlers check for themselves. Any
// thread.
#pragma once

#include <fuse_lowlevel.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fs/access.h"
#include "fs/file_system.h"

namespace kvfs::fuse::perm {

// The caller of `req` for permission checks made while it is served. Its
// supplementary groups are read from /proc the first time a check needs
// them (fs::Caller::in_group), then kept. Lives on the handler's stack:
// not copied or moved (the caller's in_group refers to it), valid only
// until `req` is answered.
class RequestCaller {
 public:
  explicit RequestCaller(fuse_req_t req);
  RequestCaller(const RequestCaller&) = delete;
  RequestCaller& operator=(const RequestCaller&) = delete;

  const fs::Caller& caller() const { return caller_; }
  // What fs/ calls that check permissions take: the caller, or null when
  // the mount leaves the checks to the kernel (default_permissions).
  const fs::Caller* check() const { return checking_ ? &caller_ : nullptr; }

 private:
  bool InGroup(uint32_t gid);

  fuse_req_t req_;
  bool checking_;
  bool have_groups_ = false;
  std::vector<uint32_t> groups_;
  fs::Caller caller_;
};

// Whether this kernel can drop every cached name at once
// (FUSE_NOTIFY_INC_EPOCH): Linux 6.16 or later. Mount::Create drops
// default_permissions only then.
bool KernelCanDropAllNames();

// Whether everyone may search directory `dir` (all three x bits): names in
// it may then be cached by the kernel.
inline bool EveryoneSearches(const fs::Attr& dir) { return (dir.mode & 0111) == 0111; }

// OK if the caller of `req` may access `attr` as `want` (fs::kMayRead, ...),
// else EACCES.
Status Check(fuse_req_t req, const fs::Attr& attr, int want);

// Lookup of the control directory's name in the root: search permission
// on the root. `*cacheable` is set to whether the reply's name may be
// cached (EveryoneSearches(root)). Every other lookup is checked by
// fs::FileSystem::Lookup.
Status MayLookupControlDir(fuse_req_t req, bool* cacheable);
// access(2), chdir(2): `mask` of R_OK, W_OK, X_OK (F_OK: 0).
Status MayAccess(fuse_req_t req, uint64_t ino, int mask);
// create, mkdir, mknod: write and search permission on `parent`.
// `*cacheable` is set to whether the reply's names may be cached
// (EveryoneSearches(parent)).
Status MayCreate(fuse_req_t req, uint64_t parent, bool* cacheable);
// unlink, rmdir: write and search permission on `parent`, and the sticky
// rule for `name` in it.
Status MayDelete(fuse_req_t req, uint64_t parent, std::string_view name);
// rename: MayDelete on the source and, if the target exists, on it; a
// directory moved to another parent also needs write permission on itself
// (its ".." changes). `*drop_names`: the name moves from a directory whose
// names are cached into one whose are not, so the kernel's cached entry
// must go (DropAllNames after the rename).
Status MayRename(fuse_req_t req, uint64_t parent, std::string_view name, uint64_t new_parent,
                 std::string_view new_name, bool* drop_names);
// setattr: chmod by the owner or root (S_ISGID cleared from *mode when a
// caller other than root is not in the file's group), chown by root, chgrp
// by the owner to a group of its own, explicit times by the owner, "now"
// also with write permission, truncate without a handle with write
// permission. `to_set` is libfuse's FUSE_SET_ATTR_* mask. `*narrowed`: a
// directory loses search permission for someone (DropAllNames after it).
Status MaySetAttr(fuse_req_t req, uint64_t ino, int to_set, bool with_handle, uint32_t* mode,
                  uint32_t uid, uint32_t gid, bool* narrowed);
// getxattr (`write` false), setxattr and removexattr (`write` true) of
// `name`: user.* needs read or write permission, and writing one on a
// sticky directory needs its owner.
Status MayXattr(fuse_req_t req, uint64_t ino, std::string_view name, bool write);

// Tells the kernel to drop every cached name of the mount
// (FUSE_NOTIFY_INC_EPOCH). Logs a failure. Never blocks on the kernel's
// locks, so it may be called from a handler before it replies.
void DropAllNames(fuse_req_t req);

}  // namespace kvfs::fuse::perm
