// ioctl.
//
// kvfs's own ioctls (include/kvfs/ioctl.h) go to batch_ioctl.cc; every
// other command (TCGETS...) is ENOTTY.
#include <spdlog/spdlog.h>

#include <string>

#include "kvfs/ioctl.h"
#include "fuse/ops.h"
#include "fuse/reply.h"

namespace kvfs::fuse::ops {

void Ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void* /*arg*/, fuse_file_info* fi,
           unsigned flags, const void* in_buf, size_t in_bufsz, size_t out_bufsz) {
  if (_IOC_TYPE(cmd) == KVFS_IOC_MAGIC) {
    KvfsIoctl(req, ino, cmd, fi, flags, in_buf, in_bufsz, out_bufsz);
    return;
  }
  // Every Python open() asks isatty() (TCGETS); "not a terminal" at once.
  spdlog::trace("ioctl 0x{:08x} on inode {}: ENOTTY", cmd, ino);
  fuse_reply_err(req, ENOTTY);
}

}  // namespace kvfs::fuse::ops
