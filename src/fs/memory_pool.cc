#include "fs/memory_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

namespace kvfs::fs {

namespace {

// A tmpfs of kvfs's own that is mounted nowhere (the new mount API: a
// mount fd, never attached to the tree), with huge pages: a file's memory
// is then 2 MiB pages, not 4 KiB ones, and filling it costs a fraction of
// the page-cache work (the internal mount memfds live on follows
// shmem_enabled, "never" on many systems). Needs CAP_SYS_ADMIN, as the
// kernel's passthrough does; -1 where it cannot be made.
int HugeTmpfsRoot() {
  static const int root = [] {
    const int fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (fs < 0) return -1;
    int m = -1;
    // within_size: huge pages only where the file covers them (a 256 KiB
    // key does not take 2 MiB).
    if (fsconfig(fs, FSCONFIG_SET_STRING, "huge", "within_size", 0) == 0 &&
        fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0700", 0) == 0 &&
        fsconfig(fs, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) == 0) {
      m = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    }
    close(fs);
    return m;
  }();
  return root;
}

// An unnamed file for one file's bytes: on the huge-page tmpfs, else a memfd.
int NewMemoryFile() {
  if (const int root = HugeTmpfsRoot(); root >= 0) {
    const int fd = openat(root, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
  }
  return memfd_create("kvfs-file", MFD_CLOEXEC);
}

// An unnamed file the daemon holds through one read-write open, which
// ReachedByOthers' lease counts as its own. (A memfd's first open counts
// as two for a lease, so a memfd is reopened.)
int OwnMemoryFile() {
  const int fd = NewMemoryFile();
  if (fd < 0 || HugeTmpfsRoot() >= 0) return fd;
  const int own = open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR | O_CLOEXEC);
  const int e = errno;
  close(fd);
  errno = e;
  return own;
}

Status MakePages(int fd, char* data, uint64_t bytes) {
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return Status::Error(errno, "sizing a file's memory");
  }
  // Every page exists before a device read targets it: a page the tmpfs
  // cannot make (its size, the memory cgroup) fails here, with ENOMEM or
  // ENOSPC, and the load takes another path, instead of failing each
  // device read into it with EFAULT. (MAP_POPULATE would fail silently.)
  // Through the mapping, pages are huge where free huge pages exist and
  // small otherwise, never waiting for memory to be compacted (fallocate
  // would).
  if (bytes > 0 && madvise(data, bytes, MADV_POPULATE_WRITE) != 0 && errno != EINVAL) {
    return Status::Error(errno == EFAULT ? ENOMEM : errno, "making a file's memory");
  }
  return Status::OK();
}

}  // namespace

// ------------------------------------------------------------ blocks

Result<std::unique_ptr<MemoryBlock>> MemoryBlock::Make(uint64_t map_bytes) {
  auto b = std::make_unique<MemoryBlock>();
  b->fd = OwnMemoryFile();
  if (b->fd < 0) return Status::Error(errno, "making a memory file");
  if (map_bytes == 0) return b;
  if (ftruncate(b->fd, static_cast<off_t>(map_bytes)) != 0) {
    return Status::Error(errno, "sizing a file's memory");
  }
  void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, b->fd, 0);
  if (p == MAP_FAILED) return Status::Error(errno, "mapping a file's memory");
  b->data = static_cast<char*>(p);
  b->mapped = map_bytes;
  KVFS_RETURN_IF_ERROR(MakePages(b->fd, b->data, map_bytes));
  return b;
}

MemoryBlock::~MemoryBlock() {
  if (data != nullptr) munmap(data, mapped);
  if (fd >= 0) close(fd);
  if (export_id > 0 && export_release) export_release(export_id);
}

Status MemoryBlock::Remake() { return MakePages(fd, data, mapped); }

bool MemoryBlock::ReachedByOthers() const {
  // A write lease is granted only while the taker's is the one open of
  // the file (the kernel counts read-only and writable opens). A client's
  // open of the file served from it, and a client's mapping (which keeps
  // the file it mapped open), are such opens; the kernel's registration
  // of the export id holds the daemon's own. Any failure counts as reached.
  if (fcntl(fd, F_SETLEASE, F_WRLCK) != 0) return true;
  (void)fcntl(fd, F_SETLEASE, F_UNLCK);
  return false;
}

// ------------------------------------------------------------ the pool

namespace {

// Sizes of missed loads and of stored files remembered to make ahead: KV chunks come in one
// or a few sizes per cache.
constexpr size_t kWantedSizes = 4;

}  // namespace

MemoryPool::MemoryPool(uint64_t budget_bytes)
    : ahead_bytes_(budget_bytes / 8), budget_bytes_(budget_bytes) {
  if (budget_bytes_ > 0) maker_ = std::thread([this] { MakeAhead(); });
}

MemoryPool::~MemoryPool() {
  {
    MutexLock l(mu_);
    stop_ = true;
  }
  wake_.NotifyAll();
  if (maker_.joinable()) maker_.join();
}

std::unique_ptr<MemoryBlock> MemoryPool::Take(uint64_t map_bytes) {
  std::unique_ptr<MemoryBlock> b;
  {
    MutexLock l(mu_);
    auto it = kept_.find(map_bytes);
    if (it != kept_.end() && !it->second.empty()) {
      b = std::move(it->second.back());
      it->second.pop_back();
      bytes_.fetch_sub(map_bytes, std::memory_order_relaxed);
    }
    // The loads after this one want this size too: keep it made ahead.
    WantLocked(map_bytes);
    if (auto e = expected_.find(map_bytes); e != expected_.end() && --e->second == 0) {
      expected_.erase(e);
    }
  }
  wake_.NotifyOne();
  if (!b || !b->Remake().ok()) return nullptr;  // a failed one is freed here
  reused_.fetch_add(1, std::memory_order_relaxed);
  return b;
}

void MemoryPool::Expect(uint64_t map_bytes) {
  if (map_bytes == 0) return;
  {
    MutexLock l(mu_);
    WantLocked(map_bytes);
    uint64_t& e = expected_[map_bytes];
    if ((e + 1) * map_bytes <= budget_bytes_) ++e;
  }
  wake_.NotifyOne();
}

void MemoryPool::WantLocked(uint64_t map_bytes) {
  auto w = std::find(wanted_.begin(), wanted_.end(), map_bytes);
  if (w != wanted_.end()) wanted_.erase(w);
  if (wanted_.size() == kWantedSizes) wanted_.erase(wanted_.begin());
  wanted_.push_back(map_bytes);
}

void MemoryPool::Give(std::unique_ptr<MemoryBlock> b) {
  if (!b || b->data == nullptr || b->ReachedByOthers()) return;  // freed here
  MutexLock l(mu_);
  KeepLocked(std::move(b));  // or freed at return, after the lock
}

void MemoryPool::KeepLocked(std::unique_ptr<MemoryBlock> b) {
  if (bytes() + b->mapped > limit_) return;
  bytes_.fetch_add(b->mapped, std::memory_order_relaxed);
  kept_[b->mapped].push_back(std::move(b));
}

std::vector<std::unique_ptr<MemoryBlock>> MemoryPool::SetLimit(uint64_t limit) {
  std::vector<std::unique_ptr<MemoryBlock>> surplus;
  {
    MutexLock l(mu_);
    limit_ = limit;
    for (auto it = kept_.begin(); bytes() > limit_ && it != kept_.end();) {
      while (bytes() > limit_ && !it->second.empty()) {
        bytes_.fetch_sub(it->second.back()->mapped, std::memory_order_relaxed);
        surplus.push_back(std::move(it->second.back()));
        it->second.pop_back();
      }
      it = it->second.empty() ? kept_.erase(it) : std::next(it);
    }
  }
  wake_.NotifyOne();  // room may have grown
  return surplus;
}

uint64_t MemoryPool::NextToMakeLocked(std::unique_ptr<MemoryBlock>* unwanted) {
  // The newest wanted size first, while its kept blocks stay within what
  // is made ahead of it (a block per load expected, or a share of the
  // budget after misses) and all of them within the limit.
  for (auto it = wanted_.rbegin(); it != wanted_.rend(); ++it) {
    const uint64_t size = *it;
    auto k = kept_.find(size);
    const uint64_t have = k == kept_.end() ? 0 : k->second.size() * size;
    auto e = expected_.find(size);
    const uint64_t ahead = std::max({ahead_bytes_, size, e == expected_.end() ? 0 : e->second * size});
    if (have + size > ahead) continue;
    if (bytes() + size <= limit_) return size;
    // Only the limit stands in the way: a block of a size nobody wants any
    // more (loads and stores moved on) makes room.
    for (auto old = kept_.begin(); old != kept_.end(); ++old) {
      if (old->second.empty() ||
          std::find(wanted_.begin(), wanted_.end(), old->first) != wanted_.end()) {
        continue;
      }
      *unwanted = std::move(old->second.back());
      old->second.pop_back();
      bytes_.fetch_sub(old->first, std::memory_order_relaxed);
      if (old->second.empty()) kept_.erase(old);
      return 0;
    }
    return 0;
  }
  return 0;
}

void MemoryPool::MakeAhead() {
  // Work for idle time: at the lowest priority, so that making memory
  // ahead does not slow the stores that announce it (at nice 10 it took a
  // third of a busy 2-CPU machine from them).
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
  MutexLock l(mu_);
  while (!stop_) {
    std::unique_ptr<MemoryBlock> unwanted;
    const uint64_t size = NextToMakeLocked(&unwanted);
    if (unwanted) {
      l.Unlock();
      unwanted.reset();
      l.Lock();
      continue;  // the limit and the wanted sizes may have changed meanwhile
    }
    if (size == 0) {
      wake_.Wait(l);
      continue;
    }
    l.Unlock();
    Result<std::unique_ptr<MemoryBlock>> b = MemoryBlock::Make(size);
    l.Lock();
    if (!b.ok()) {
      // No memory for it now: stop asking until a load misses again.
      wanted_.clear();
      continue;
    }
    made_ahead_.fetch_add(1, std::memory_order_relaxed);
    std::unique_ptr<MemoryBlock> made = std::move(*b);
    KeepLocked(std::move(made));  // freed here, under the lock, if no room: rare
  }
}

}  // namespace kvfs::fs
