// The ioctls of kvfs/ioctl.h, one call each: 0 or -errno.
#include <errno.h>
#include <sys/ioctl.h>

#include <cstring>

#include "kvfs/kvfs.h"

namespace {

// ioctl(2) as 0 or -errno. EINTR is not retried: an interrupted batch may
// have run some of its entries (a repeated DELETE would then say ENOENT),
// so the caller decides.
int Ioctl(int fd, unsigned long cmd, void* arg) { return ioctl(fd, cmd, arg) == 0 ? 0 : -errno; }

}  // namespace

extern "C" {

int kvfs_register(int fd, int mem_fd, uint64_t length, uint64_t* buf_id) {
  if (buf_id == nullptr) return -EINVAL;
  kvfs_register_args a;
  std::memset(&a, 0, sizeof a);
  a.version = KVFS_ABI_VERSION;
  a.fd = mem_fd;
  a.length = length;
  int rc = Ioctl(fd, KVFS_IOC_REGISTER, &a);
  if (rc != 0) return rc;
  if (a.buf_id == 0) return -EPROTO;  // the ABI promises a non-zero id
  *buf_id = a.buf_id;
  return 0;
}

int kvfs_unregister(int fd, uint64_t buf_id) {
  kvfs_unregister_args a;
  std::memset(&a, 0, sizeof a);
  a.version = KVFS_ABI_VERSION;
  a.buf_id = buf_id;
  return Ioctl(fd, KVFS_IOC_UNREGISTER, &a);
}

int kvfs_batch_raw(int dirfd, uint64_t table_id, uint64_t table_off, uint32_t count,
                   kvfs_batch_args* args) {
  kvfs_batch_args a;
  std::memset(&a, 0, sizeof a);
  a.version = KVFS_ABI_VERSION;
  a.count = count;
  a.table_id = table_id;
  a.table_off = table_off;
  int rc = Ioctl(dirfd, KVFS_IOC_BATCH, &a);
  if (rc == 0 && args != nullptr) *args = a;
  return rc;
}

int kvfs_features(int fd, kvfs_features_args* out) {
  if (out == nullptr) return -EINVAL;
  kvfs_features_args a;
  std::memset(&a, 0, sizeof a);
  a.version = KVFS_ABI_VERSION;
  int rc = Ioctl(fd, KVFS_IOC_FEATURES, &a);
  if (rc == -ENOTTY || rc == -EINVAL) {
    // A daemon from before the call: it runs the base ops.
    std::memset(out, 0, sizeof *out);
    out->version = 1;
    out->ops = KVFS_OPS_BASE;
    return 1;
  }
  if (rc != 0) return rc;
  *out = a;
  return 0;
}

}  // extern "C"
