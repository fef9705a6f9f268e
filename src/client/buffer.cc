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

// Makes b->mem_fd, a memfd of b->size bytes created with `flags`, and maps
// it shared at b->data. 0 or -errno (then neither is set).
int MapMemfd(kvfs_buffer* b, unsigned flags) {
  int fd = memfd_create("kvfs-buffer", MFD_CLOEXEC | flags);
  if (fd < 0) return -errno;
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(b->size)) == 0) {
    p = mmap(nullptr, b->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    int rc = -errno;
    close(fd);
    return rc;
  }
  b->mem_fd = fd;
  b->data = p;
  return 0;
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
  } else {
    // 2 MiB huge pages when the machine has them reserved (vm.nr_hugepages)
    // and the size allows: device I/O into them is faster (one
    // scatter-gather segment per 2 MiB, not per 4 KiB). The mapping reserves
    // its pages at once, so a shortage shows here, and ordinary pages serve.
    if (size % kHugePage != 0 || MapMemfd(b, MFD_HUGETLB) != 0) rc = MapMemfd(b, 0);
    if (rc == 0) rc = kvfs_register(b->fd, b->mem_fd, size, &b->id);
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
