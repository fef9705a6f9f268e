// Permission checks of the POSIX path, made by kvfs instead of the kernel.
//
// A mount with `default_permissions` has the kernel check mode bits against
// its cached attributes, which it must then fetch again (a GETATTR of the
// directory) after every create, rename and unlink in it: two of a store's
// ten requests. Without the option the kernel checks nothing but execute
// bits of regular files, and kvfs makes the checks generic_permission(),
// may_create(), may_delete(), may_open(), setattr_prepare() and
// xattr_permission() made (fs/namei.c, fs/attr.c, fs/xattr.c), with its
// current attributes, for the caller of the request (uid, gid, and its
// supplementary groups, read from /proc only when they decide the answer).
// Each handler makes one fs/ call, which takes the caller to check
// (RequestCaller::check(): null when the mount leaves the checks to the
// kernel) and checks it under the same locks as the operation
// (fs/file_system.h says what each call checks; the rules are
// fs/access.h's).
//
//   perm::RequestCaller who(req);
//   Status st = fs->Unlink(parent, name, who.check());
//
// Path walks: the kernel walks cached names without asking, so a directory
// whose search permission not everyone has (mode without all three x bits)
// gets its names cached for no time (the fs/ calls' `everyone_searches`):
// every walk through it comes as a LOOKUP, which checks search permission.
// When a directory loses an x bit, or a name moves into such a directory,
// every cached name of the mount is dropped (FUSE_NOTIFY_INC_EPOCH, Linux
// 6.16+), so no walk uses a name cached before.
//
// The control directory's inodes never reach fs/ (fuse/route.h); its
// handlers check for themselves, with Check and MayLookupControlDir. Any
// thread.
#pragma once

#include <fuse_lowlevel.h>

#include <cstdint>
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

// OK if the caller of `req` may access `attr` (a control file's) as
// `want` (fs::kMayRead, ...), else EACCES; OK when the mount leaves the
// checks to the kernel.
Status Check(fuse_req_t req, const fs::Attr& attr, int want);

// Lookup of the control directory's name in the root: search permission
// on the root. `*cacheable` is set to whether the reply's name may be
// cached (everyone may search the root).
Status MayLookupControlDir(fuse_req_t req, bool* cacheable);

// Tells the kernel to drop every cached name of the mount
// (FUSE_NOTIFY_INC_EPOCH). Logs a failure. Never blocks on the kernel's
// locks, so it may be called from a handler before it replies.
void DropAllNames(fuse_req_t req);

}  // namespace kvfs::fuse::perm
