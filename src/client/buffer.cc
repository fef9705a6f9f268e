// kvfs_buffer: a memfd mapped shared here and registered with the daemon.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>

#include "kvfs/kvfs.h"

struct kvfs_buffer {
  int fd = -1;      // our duplicate of the kvfs fd: the registration lives
                    // as long as the open file does, so we hold it open
  int mem_fd = -1;  // the memfd
  void* data = nullptr;
  size_t size = 0;  // multiple of 4096
  uint64_t id = 0;
};

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kHugePage = size_t{2} << 20;

// A memfd of `size` bytes in 2 MiB huge pages, mapped, when the machine has
// them reserved (vm.nr_hugepages) and `size` is a multiple of 2 MiB: device
// I/O into huge pages is faster (one scatter-gather segment per 2 MiB, not
// per 4 KiB). The mapping reserves its pages at once, so a shortage shows
// here (and falls back to ordinary pages), never later as a fault.
bool MapHuge(kvfs_buffer* b) {
  if (b->size % kHugePage != 0) return false;
  int fd = memfd_create("kvfs-buffer", MFD_CLOEXEC | MFD_HUGETLB);
  if (fd < 0) return false;
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(b->size)) == 0) {
    p = mmap(nullptr, b->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    close(fd);
    return false;
  }
  b->mem_fd = fd;
  b->data = p;
  return true;
}

void Release(kvfs_buffer* b) {
  if (b->data != nullptr) munmap(b->data, b->size);
  if (b->mem_fd >= 0) close(b->mem_fd);
  if (b->fd >= 0) close(b->fd);
  delete b;
}

}  // namespace

extern "C" {

int kvfs_buffer_create(int fd, size_t size, kvfs_buffer** out) {
  if (out == nullptr || size == 0 || size > KVFS_REGISTER_MAX_BYTES) return -EINVAL;
  size = (size + kPage - 1) / kPage * kPage;
  auto* b = new (std::nothrow) kvfs_buffer;
  if (b == nullptr) return -ENOMEM;
  int rc = 0;
  b->size = size;
  b->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (b->fd < 0) {
    rc = -errno;
  } else if (MapHuge(b)) {
    rc = kvfs_register(b->fd, b->mem_fd, size, &b->id);
  } else if ((b->mem_fd = memfd_create("kvfs-buffer", MFD_CLOEXEC)) < 0) {
    rc = -errno;
  } else if (ftruncate(b->mem_fd, static_cast<off_t>(size)) != 0) {
    rc = -errno;
  } else if ((b->data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, b->mem_fd, 0)) ==
             MAP_FAILED) {
    rc = -errno;
    b->data = nullptr;
  } else {
    rc = kvfs_register(b->fd, b->mem_fd, size, &b->id);
  }
  if (rc != 0) {
    Release(b);
    return rc;
  }
  *out = b;
  return 0;
}

int kvfs_buffer_destroy(kvfs_buffer* buf) {
  if (buf == nullptr) return 0;
  int rc = kvfs_unregister(buf->fd, buf->id);
  Release(buf);
  return rc;
}

void* kvfs_buffer_data(const kvfs_buffer* buf) { return buf->data; }
size_t kvfs_buffer_size(const kvfs_buffer* buf) { return buf->size; }
uint64_t kvfs_buffer_id(const kvfs_buffer* buf) { return buf->id; }

}  // extern "C"
