// Extended attributes (rules and errno: fs/xattr.h).
//
// user.kvfs.prefetch is a hint, not an attribute: setting it (any value)
// prefetches the file or directory, and it is never stored. Other
// user.kvfs.* names are reserved. security.* and system.* get ENODATA (set:
// EOPNOTSUPP) here from the name alone: the kernel asks for
// security.capability around writes, and that answer touches no inode.
#include <string>

#include "fs/xattr.h"
#include "fuse/control.h"
#include "fuse/ops.h"
#include "fuse/permissions.h"
#include "fuse/reply.h"

namespace kvfs::fuse::ops {

namespace {

// getxattr/listxattr's size protocol: size 0 asks for the length, a buffer
// too small for `value` is ERANGE.
void ReplySized(fuse_req_t req, const std::string& value, size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, value.size());
  } else if (size < value.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, value.data(), value.size());
  }
}

}  // namespace

void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
              int flags) {
  SessionState& s = StateOf(req);
  // fs/ checks the caller's permission for user.* names (fs/access.h
  // CheckXattr), the hint's as a set's.
  perm::RequestCaller who(req);
  if (control::kPrefetchXattr == name) {
    ReplyStatus(req, NoThrow([&] { return s.fs->Prefetch(ino, who.check()); }), "setxattr");
    return;
  }
  ReplyStatus(req, NoThrow([&] {
                return s.fs->SetXattr(ino, name, std::string_view(value, size), flags,
                                      who.caller(), who.check());
              }),
              "setxattr");
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  if (fs::xattr::IsNeverStored(name)) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  SessionState& s = StateOf(req);
  perm::RequestCaller who(req);
  Result<std::string> r =
      NoThrow([&] { return s.fs->GetXattr(ino, name, who.caller(), who.check()); });
  if (!r.ok()) {
    ReplyStatus(req, r.status(), "getxattr");
    return;
  }
  ReplySized(req, *r, size);
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  SessionState& s = StateOf(req);
  const fs::Caller caller = CallerOf(req);
  Result<std::string> r = NoThrow([&] { return s.fs->ListXattr(ino, caller); });
  if (!r.ok()) {
    ReplyStatus(req, r.status(), "listxattr");
    return;
  }
  ReplySized(req, *r, size);
}

void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  SessionState& s = StateOf(req);
  perm::RequestCaller who(req);
  ReplyStatus(req,
              NoThrow([&] { return s.fs->RemoveXattr(ino, name, who.caller(), who.check()); }),
              "removexattr");
}

}  // namespace kvfs::fuse::ops
