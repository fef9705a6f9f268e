#include "fs/file_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

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

std::unique_ptr<MemoryBlock> MemoryPool::Take(uint64_t map_bytes) {
  std::unique_ptr<MemoryBlock> b;
  {
    MutexLock l(mu_);
    auto it = kept_.find(map_bytes);
    if (it == kept_.end() || it->second.empty()) return nullptr;
    b = std::move(it->second.back());
    it->second.pop_back();
    bytes_.fetch_sub(map_bytes, std::memory_order_relaxed);
  }
  if (!b->Remake().ok()) return nullptr;  // freed here
  reused_.fetch_add(1, std::memory_order_relaxed);
  return b;
}

void MemoryPool::Give(std::unique_ptr<MemoryBlock> b) {
  if (!b || b->data == nullptr || b->ReachedByOthers()) return;  // freed here
  MutexLock l(mu_);
  if (bytes() + b->mapped > limit_) return;  // freed at return, after the lock
  bytes_.fetch_add(b->mapped, std::memory_order_relaxed);
  kept_[b->mapped].push_back(std::move(b));
}

std::vector<std::unique_ptr<MemoryBlock>> MemoryPool::SetLimit(uint64_t limit) {
  std::vector<std::unique_ptr<MemoryBlock>> surplus;
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
  return surplus;
}

// ------------------------------------------------------------ file memory

FileMemory::FileMemory(std::unique_ptr<MemoryBlock> block, bool zeroed, MemoryVersion version,
                       std::shared_ptr<MemoryPool> pool)
    : pool_(std::move(pool)),
      fd_(block->fd),
      data_(block->data),
      mapped_(block->mapped),
      zeroed_(zeroed),
      version_(std::move(version)),
      block_(std::move(block)) {}

FileMemory::~FileMemory() {
  MutexLock l(mu_);
  if (pool_) pool_->Give(std::move(block_));
}

bool FileMemory::WaitIfLoading(std::function<void(bool ok)> fn) {
  MutexLock l(mu_);
  if (state_ != State::kLoading) return false;
  waiters_.push_back(std::move(fn));
  return true;
}

FileMemory::State FileMemory::state() const {
  MutexLock l(mu_);
  return state_;
}

bool FileMemory::has_waiters() const {
  MutexLock l(mu_);
  return state_ == State::kLoading && !waiters_.empty();
}

void FileMemory::Finish(bool ok) {
  // Pages past the size were read only because the device reads whole
  // blocks; the kernel must see exactly the file.
  if (ok && version_.size < mapped_ && ftruncate(fd_, static_cast<off_t>(version_.size)) != 0) {
    ok = false;
  }
  if (!ok) (void)ftruncate(fd_, 0);  // nothing will read it: its pages go back
  std::vector<std::function<void(bool)>> waiters;
  {
    MutexLock l(mu_);
    state_ = ok ? State::kReady : State::kFailed;
    waiters.swap(waiters_);
  }
  for (auto& w : waiters) w(ok);
}

int FileMemory::ExportId(const std::function<int(int fd)>& make,
                         std::function<void(int id)> release) {
  MutexLock l(mu_);
  if (block_->export_id > 0) return block_->export_id;
  const int id = make(fd_);
  if (id > 0) {
    block_->export_id = id;
    block_->export_release = std::move(release);
  }
  return id;
}

int FileMemory::export_id() const {
  MutexLock l(mu_);
  return block_->export_id;
}

// ------------------------------------------------------------ the cache

namespace {

// The part of the budget left to memory kept for the next loads: enough
// for the loads between two evictions of many loops at once.
uint64_t PoolReserve(uint64_t budget) { return budget / 8; }

}  // namespace

FileMemoryCache::FileMemoryCache(uint64_t budget_bytes)
    : budget_(budget_bytes), reserve_(PoolReserve(budget_bytes)) {
  MutexLock l(mu_);
  LimitPoolLocked();
}

void FileMemoryCache::LimitPoolLocked() {
  // Nothing is kept beyond the limit when it shrinks (entries grew), so
  // no block is freed here, under the lock: Insert trims the pool first.
  std::vector<std::unique_ptr<MemoryBlock>> none = pool_->SetLimit(budget_ - bytes_);
  (void)none;
}

Result<std::shared_ptr<FileMemory>> FileMemoryCache::Make(MemoryVersion version,
                                                         uint64_t map_bytes) {
  std::unique_ptr<MemoryBlock> b = pool_->Take(map_bytes);
  const bool zeroed = !b;
  if (zeroed) {
    KVFS_ASSIGN_OR_RETURN(b, MemoryBlock::Make(map_bytes));
  }
  return std::make_shared<FileMemory>(std::move(b), zeroed, std::move(version), pool_);
}

std::shared_ptr<FileMemory> FileMemoryCache::Get(uint64_t owner) {
  MutexLock l(mu_);
  auto it = slots_.find(owner);
  if (it == slots_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.memory;
}

bool FileMemoryCache::Insert(uint64_t owner, const std::shared_ptr<FileMemory>& m,
                             bool prefetch) {
  std::vector<std::shared_ptr<FileMemory>> gone;  // freed after the lock
  std::vector<std::unique_ptr<MemoryBlock>> surplus;  // the same
  bool ok = false;
  {
    MutexLock l(mu_);
    auto same = slots_.find(owner);
    if (same != slots_.end()) {
      // Opens served from the entry read and write it: it stays the
      // file's memory until the last of them is released.
      if (same->second.memory->opens.load() > 0) {
        no_room_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      EraseLocked(same, &gone);
    }
    // Oldest first; entries that opens use or that are still loading stay.
    auto it = lru_.end();
    const uint64_t room = budget_ - reserve_;
    while (bytes_ + m->bytes() > room && it != lru_.begin()) {
      --it;
      auto s = slots_.find(*it);
      const FileMemory& v = *s->second.memory;
      if (v.opens.load() > 0 || v.pending.load() > 0 ||
          v.state() == FileMemory::State::kLoading) {
        continue;
      }
      // A speculative load is not pushed out by another speculative load
      // before it was used (the loop would undo its own prefetch).
      if (prefetch && v.unused_prefetch.load()) continue;
      auto next = std::next(it);
      EraseLocked(s, &gone);
      dropped_.fetch_add(1, std::memory_order_relaxed);
      it = next;
    }
    if (bytes_ + m->bytes() <= room) {
      lru_.push_front(owner);
      slots_.emplace(owner, Slot{m, lru_.begin()});
      bytes_ += m->bytes();
      surplus = pool_->SetLimit(budget_ - bytes_);
      m->unused_prefetch.store(prefetch);
      if (prefetch) {
        unused_prefetch_bytes_.fetch_add(m->bytes(), std::memory_order_relaxed);
        prefetched_.fetch_add(m->bytes(), std::memory_order_relaxed);
      }
      loads_.fetch_add(1, std::memory_order_relaxed);
      load_bytes_.fetch_add(m->version().size, std::memory_order_relaxed);
      ok = true;
    } else {
      no_room_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return ok;
}

void FileMemoryCache::EraseLocked(std::unordered_map<uint64_t, Slot>::iterator it,
                                  std::vector<std::shared_ptr<FileMemory>>* gone) {
  FileMemory& m = *it->second.memory;
  if (m.unused_prefetch.exchange(false)) {
    unused_prefetch_bytes_.fetch_sub(m.bytes(), std::memory_order_relaxed);
    wasted_.fetch_add(m.bytes(), std::memory_order_relaxed);
  }
  bytes_ -= m.bytes();
  LimitPoolLocked();  // before `m` may go to the pool
  lru_.erase(it->second.lru);
  gone->push_back(std::move(it->second.memory));
  slots_.erase(it);
}

void FileMemoryCache::Erase(uint64_t owner, const FileMemory* m) {
  std::vector<std::shared_ptr<FileMemory>> gone;
  MutexLock l(mu_);
  auto it = slots_.find(owner);
  if (it == slots_.end()) return;
  if (m != nullptr && it->second.memory.get() != m) return;
  if (it->second.memory->opens.load() > 0 || it->second.memory->pending.load() > 0) return;
  EraseLocked(it, &gone);
}

void FileMemoryCache::Clear() {
  std::vector<std::shared_ptr<FileMemory>> gone;
  MutexLock l(mu_);
  for (auto it = slots_.begin(); it != slots_.end();) {
    auto next = std::next(it);
    if (it->second.memory->opens.load() == 0) EraseLocked(it, &gone);
    it = next;
  }
}

void FileMemoryCache::MarkUsed(FileMemory& m) {
  hits_.fetch_add(1, std::memory_order_relaxed);
  if (!m.unused_prefetch.load(std::memory_order_relaxed)) return;
  MutexLock l(mu_);  // orders with EraseLocked's exchange
  if (m.unused_prefetch.exchange(false)) {
    unused_prefetch_bytes_.fetch_sub(m.bytes(), std::memory_order_relaxed);
    prefetch_used_.fetch_add(m.bytes(), std::memory_order_relaxed);
  }
}

FileMemoryCounters FileMemoryCache::counters() const {
  FileMemoryCounters c;
  c.budget_bytes = budget_;
  {
    MutexLock l(mu_);
    c.bytes = bytes_;
    c.files = slots_.size();
  }
  c.loads = loads_.load(std::memory_order_relaxed);
  c.load_bytes = load_bytes_.load(std::memory_order_relaxed);
  c.dropped = dropped_.load(std::memory_order_relaxed);
  c.no_room = no_room_.load(std::memory_order_relaxed);
  c.unused_prefetch_bytes = unused_prefetch_bytes();
  c.served_opens = served_opens_.load(std::memory_order_relaxed);
  c.hits = hits_.load(std::memory_order_relaxed);
  c.prefetched_bytes = prefetched_.load(std::memory_order_relaxed);
  c.prefetch_used_bytes = prefetch_used_.load(std::memory_order_relaxed);
  c.prefetch_wasted_bytes = wasted_.load(std::memory_order_relaxed);
  c.served_bytes = served_bytes_.load(std::memory_order_relaxed);
  c.kept_bytes = pool_->bytes();
  c.reused = pool_->reused();
  return c;
}

}  // namespace kvfs::fs
