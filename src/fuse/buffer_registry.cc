#include "fuse/buffer_registry.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kvfs/ioctl.h"

namespace kvfs::fuse {

namespace {

// --- The SIGBUS guard (see the header). The handler may not lock, so live
// mappings are kept in a fixed table of atomics; a slot is [start, end)
// with its page size, all zero when free.
struct GuardSlot {
  std::atomic<uintptr_t> start{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<uintptr_t> page{0};
};
constexpr size_t kGuardSlots = 1 << 16;
std::array<GuardSlot, kGuardSlots> g_guard;
Mutex g_guard_mu;  // serializes slot allocation (not the handler)
struct sigaction g_previous_bus;
std::once_flag g_guard_installed;

void OnSigbus(int sig, siginfo_t* info, void* ctx) {
  auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardSlot& s : g_guard) {
    uintptr_t start = s.start.load(std::memory_order_acquire);
    if (start == 0 || addr < start || addr >= s.end.load(std::memory_order_acquire)) continue;
    uintptr_t page = s.page.load(std::memory_order_acquire);
    uintptr_t at = addr & ~(page - 1);
    // The client shrank its file under our mapping: put zero pages where the
    // lost ones were and let the access complete.
    void* p = mmap(reinterpret_cast<void*>(at), page, PROT_READ | PROT_WRITE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) return;
    break;
  }
  // Not ours (or the repair failed): what would have happened without us.
  if (g_previous_bus.sa_flags & SA_SIGINFO) {
    if (g_previous_bus.sa_sigaction != nullptr) {
      g_previous_bus.sa_sigaction(sig, info, ctx);
      return;
    }
  } else if (g_previous_bus.sa_handler != SIG_DFL && g_previous_bus.sa_handler != SIG_IGN) {
    g_previous_bus.sa_handler(sig);
    return;
  }
  signal(SIGBUS, SIG_DFL);  // the faulting access repeats and kills us, with a core
}

void InstallGuard() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = OnSigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &g_previous_bus) != 0) {
    spdlog::warn("cannot install the SIGBUS handler for registered buffers: {}",
                 std::strerror(errno));
  }
}

int GuardAdd(uintptr_t start, uintptr_t len, uintptr_t page) {
  std::call_once(g_guard_installed, InstallGuard);
  MutexLock l(g_guard_mu);
  for (size_t i = 0; i < kGuardSlots; ++i) {
    GuardSlot& s = g_guard[i];
    if (s.start.load(std::memory_order_relaxed) != 0) continue;
    s.page.store(page, std::memory_order_relaxed);
    s.end.store(start + len, std::memory_order_relaxed);
    s.start.store(start, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

void GuardRemove(int slot) {
  MutexLock l(g_guard_mu);
  g_guard[slot].start.store(0, std::memory_order_release);
  g_guard[slot].end.store(0, std::memory_order_relaxed);
}

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

bool Exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

// The access mode the process opened `fd` with (O_RDONLY/O_WRONLY/O_RDWR),
// from /proc/TGID/fdinfo/FD.
Result<int> AccessModeOf(pid_t tgid, int fd) {
  std::string path = "/proc/" + std::to_string(tgid) + "/fdinfo/" + std::to_string(fd);
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) {
    return Status::Error(errno == ENOENT ? EBADF : errno, "register: fd " + std::to_string(fd));
  }
  char line[256];
  long flags = -1;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "flags:", 6) == 0) {
      flags = std::strtol(line + 6, nullptr, 8);
      break;
    }
  }
  std::fclose(f);
  if (flags < 0) return Status::Error(EBADF, "register: no flags in " + path);
  return static_cast<int>(flags & O_ACCMODE);
}

}  // namespace

void UnblockFaultSignals() {
  thread_local bool done = false;
  if (done) return;
  sigset_t bus;
  sigemptyset(&bus);
  sigaddset(&bus, SIGBUS);
  pthread_sigmask(SIG_UNBLOCK, &bus, nullptr);
  done = true;
}

Result<pid_t> TgidOf(pid_t tid) {
  if (tid <= 0) return Status::Error(ESRCH, "caller outside the daemon's pid namespace");
  std::string path = "/proc/" + std::to_string(tid) + "/status";
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return Status::Error(ESRCH, path);
  char line[256];
  pid_t tgid = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "Tgid:", 5) == 0) {
      tgid = static_cast<pid_t>(std::strtol(line + 5, nullptr, 10));
      break;
    }
  }
  std::fclose(f);
  if (tgid <= 0) return Status::Error(ESRCH, path + ": no Tgid");
  return tgid;
}

// --- MappedBuffer

Result<std::shared_ptr<MappedBuffer>> MappedBuffer::Map(int fd, uint64_t len,
                                                          uint64_t page_bytes) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::FromErrno("register: mmap");
  int slot = GuardAdd(reinterpret_cast<uintptr_t>(p), len, page_bytes);
  if (slot < 0) {
    munmap(p, len);
    return Status::Error(ENOMEM, "register: too many registrations in the daemon");
  }
  try {
    return std::shared_ptr<MappedBuffer>(new MappedBuffer(static_cast<char*>(p), len, slot));
  } catch (const std::bad_alloc&) {
    GuardRemove(slot);
    munmap(p, len);
    return Status::Error(ENOMEM, "out of memory");
  }
}

MappedBuffer::~MappedBuffer() {
  munmap(data_, size_);
  GuardRemove(guard_slot_);
}

// --- BufferRegistry

BufferRegistry::~BufferRegistry() {
  by_id_.clear();
  for (auto& [tgid, p] : processes_) close(p.pidfd);
}

Result<uint64_t> BufferRegistry::Register(const Registrant& who, int fd, uint64_t length,
                                          OwnerFile owner) {
  if (length == 0 || length % 4096 != 0 || length > KVFS_REGISTER_MAX_BYTES) {
    return Status::Error(EINVAL, "register: length must be a non-zero multiple of 4096 up to 1 TiB");
  }
  if (fd < 0) return Status::Error(EBADF, "register: negative fd");
  {
    MutexLock l(mu_);
    SweepLocked();
    auto p = processes_.find(who.tgid);
    if (p != processes_.end() && p->second.registrations >= KVFS_MAX_REGISTRATIONS) {
      return Status::Error(EMFILE, "register: the process has the most registrations allowed");
    }
  }
  // The pidfd first: if the process is gone by the time its fd is opened
  // (and its number reused), the pidfd tells.
  int pidfd = PidfdOpen(who.tgid);
  if (pidfd < 0) return Status::Error(ESRCH, "register: pidfd_open");
  auto close_pidfd = [&] {
    if (pidfd >= 0) close(pidfd);
  };

  Result<int> mode = AccessModeOf(who.tgid, fd);
  if (!mode.ok()) {
    close_pidfd();
    return mode.status();
  }
  if (*mode != O_RDWR) {
    close_pidfd();
    return Status::Error(EACCES, "register: the fd is not open for reading and writing");
  }
  std::string link = "/proc/" + std::to_string(who.tgid) + "/fd/" + std::to_string(fd);
  // stat() before open(): opening a device or FIFO could have effects.
  struct stat st;
  const bool stat_ok = stat(link.c_str(), &st) == 0;
  if (!stat_ok || !S_ISREG(st.st_mode)) {
    // errno only means something when stat() itself failed.
    int code = !stat_ok && errno == ENOENT ? EBADF : EINVAL;
    close_pidfd();
    return Status::Error(code, "register: not a regular file");
  }
  int mfd = open(link.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (mfd < 0) {
    int code = errno == ENOENT ? EBADF : errno;
    close_pidfd();
    return Status::Error(code, "register: open " + link);
  }
  auto fail = [&](int code, const std::string& what) -> Status {
    close(mfd);
    close_pidfd();
    return Status::Error(code, "register: " + what);
  };
  struct statfs sfs;
  if (fstat(mfd, &st) != 0 || fstatfs(mfd, &sfs) != 0) return fail(errno, "fstat");
  if (!S_ISREG(st.st_mode)) return fail(EINVAL, "not a regular file");
  bool huge = sfs.f_type == static_cast<decltype(sfs.f_type)>(HUGETLBFS_MAGIC);
  if (sfs.f_type != static_cast<decltype(sfs.f_type)>(TMPFS_MAGIC) && !huge) {
    return fail(EINVAL, "not a memfd or a tmpfs/hugetlbfs file");
  }
  if (who.uid != 0 && st.st_uid != who.uid) return fail(EPERM, "the file is another user's");
  if (static_cast<uint64_t>(st.st_size) < length) return fail(EINVAL, "the file is shorter than length");
  uint64_t page = huge ? static_cast<uint64_t>(st.st_blksize) : 4096;
  if (page == 0 || (page & (page - 1)) != 0 || length % page != 0) {
    return fail(EINVAL, "length is not a multiple of the file's page size");
  }
  if (Exited(pidfd)) return fail(ESRCH, "the process exited");
  Result<std::shared_ptr<MappedBuffer>> buf = MappedBuffer::Map(mfd, length, page);
  close(mfd);  // the mapping holds the file
  if (!buf.ok()) {
    close_pidfd();
    return buf.status();
  }

  MutexLock l(mu_);
  ReapIfGoneLocked(who.tgid);
  try {
    Process& p = processes_[who.tgid];
    if (p.pidfd < 0) {
      p.pidfd = pidfd;
      pidfd = -1;
    }
    close_pidfd();
    if (p.registrations >= KVFS_MAX_REGISTRATIONS) {
      return Status::Error(EMFILE, "register: the process has the most registrations allowed");
    }
    uint64_t id = next_id_++;
    by_id_.emplace(id, Registration{who.tgid, owner, std::move(*buf)});
    ++p.registrations;
    return id;
  } catch (const std::bad_alloc&) {
    close_pidfd();
    return Status::Error(ENOMEM, "out of memory");
  }
}

Status BufferRegistry::Unregister(pid_t tgid, uint64_t id) {
  MutexLock l(mu_);
  ReapIfGoneLocked(tgid);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second.tgid != tgid) {
    return Status::Error(EBADF, "unregister: not a registration of this process");
  }
  EraseLocked(it);
  return Status::OK();
}

Result<std::shared_ptr<MappedBuffer>> BufferRegistry::Find(pid_t tgid, uint64_t id) {
  MutexLock l(mu_);
  ReapIfGoneLocked(tgid);
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second.tgid != tgid) {
    return Status::Error(EBADF, "buffer " + std::to_string(id) + ": not a registration of this process");
  }
  return it->second.buffer;
}

void BufferRegistry::DropOwner(OwnerFile owner) {
  MutexLock l(mu_);
  for (auto it = by_id_.begin(); it != by_id_.end();) {
    auto next = std::next(it);
    if (!(it->second.owner < owner) && !(owner < it->second.owner)) EraseLocked(it);
    it = next;
  }
}

size_t BufferRegistry::Live() {
  MutexLock l(mu_);
  SweepLocked();
  return by_id_.size();
}

void BufferRegistry::SweepLocked() {
  for (auto it = processes_.begin(); it != processes_.end();) {
    pid_t tgid = it->first;
    ++it;  // ReapIfGoneLocked may erase the current one
    ReapIfGoneLocked(tgid);
  }
}

bool BufferRegistry::ReapIfGoneLocked(pid_t tgid) {
  auto p = processes_.find(tgid);
  if (p == processes_.end() || !Exited(p->second.pidfd)) return false;
  for (auto it = by_id_.begin(); it != by_id_.end();) {
    auto next = std::next(it);
    if (it->second.tgid == tgid) EraseLocked(it);
    it = next;
  }
  p = processes_.find(tgid);
  if (p != processes_.end()) {
    close(p->second.pidfd);
    processes_.erase(p);
  }
  return true;
}

void BufferRegistry::EraseLocked(std::map<uint64_t, Registration>::iterator it) {
  pid_t tgid = it->second.tgid;
  by_id_.erase(it);  // the mapping goes when no batch holds it any more
  auto p = processes_.find(tgid);
  if (p == processes_.end()) return;
  if (--p->second.registrations == 0) {
    close(p->second.pidfd);
    processes_.erase(p);
  }
}

}  // namespace kvfs::fuse
