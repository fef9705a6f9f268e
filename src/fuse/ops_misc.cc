// ioctl and extended attributes.
//
// kvfs's own ioctls (include/kvfs/ioctl.h) go to batch_ioctl.cc; every
// other command (TCGETS...) and any ioctl on a control file is ENOTTY. The one
// attribute that can be set is the hint user.kvfs.prefetch (any value):
// setting it prefetches the file or directory; it is never stored, so
// getxattr finds nothing. Every other name is EOPNOTSUPP, so nothing
// pretends to succeed.
#include <spdlog/spdlog.h>

#include <string>

#include "fuse/control.h"
#include "kvfs/ioctl.h"
#include "fuse/ops.h"
#include "fuse/reply.h"

namespace kvfs::fuse::ops {

void Ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void* /*arg*/, fuse_file_info* fi,
           unsigned flags, const void* in_buf, size_t in_bufsz, size_t out_bufsz) {
  if (_IOC_TYPE(cmd) == KVFS_IOC_MAGIC && !control::Owns(ino)) {
    KvfsIoctl(req, ino, cmd, fi, flags, in_buf, in_bufsz, out_bufsz);
    return;
  }
  // Every Python open() asks isatty() (TCGETS); "not a terminal" at once.
  spdlog::trace("ioctl 0x{:08x} on inode {}: ENOTTY", cmd, ino);
  fuse_reply_err(req, ENOTTY);
}

void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* /*value*/,
              size_t /*size*/, int /*flags*/) {
  if (control::kPrefetchXattr == name && !control::Owns(ino)) {
    SessionState& s = StateOf(req);
    ReplyStatus(req, NoThrow([&] { return s.fs->Prefetch(ino); }), "setxattr");
    return;
  }
  Status st = NoThrow([&] {
    return Status::Error(EOPNOTSUPP,
                         std::string(name) + ": extended attributes are not supported");
  });
  ReplyStatus(req, st, "setxattr");
}

void GetXattr(fuse_req_t req, fuse_ino_t /*ino*/, const char* /*name*/, size_t /*size*/) {
  // No attribute can exist (SetXattr refuses all), so every name is absent.
  fuse_reply_err(req, ENODATA);
}

void ListXattr(fuse_req_t req, fuse_ino_t /*ino*/, size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, 0);  // the list's length: empty
  } else {
    fuse_reply_buf(req, nullptr, 0);
  }
}

void RemoveXattr(fuse_req_t req, fuse_ino_t /*ino*/, const char* /*name*/) {
  fuse_reply_err(req, ENODATA);
}

}  // namespace kvfs::fuse::ops
