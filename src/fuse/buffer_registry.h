// BufferRegistry: the shared memory clients register for the batch ioctl
// (KVFS_IOC_REGISTER, include/kvfs/ioctl.h).
//
// Registration proves ownership: the daemon opens the caller's own fd
// through /proc/TGID/fd/FD (so it gets exactly the file the caller holds)
// and requires that the caller opened it O_RDWR, that it is a regular file
// on tmpfs or hugetlbfs (a memfd is), owned by the caller's uid (root may
// register any), at least `length` bytes long. It then maps it MAP_SHARED.
//
// A registration belongs to (process, open file of the mount the ioctl was
// issued on): only that process (thread group) finds it, everyone else gets
// EBADF. It ends at Unregister(), at DropOwner() (release/releasedir of
// that open file) or when the process has exited (checked through a pidfd
// at every Register/Find of that process and at Live(), so nothing outlives
// the process for longer than the next look at the registry; the release
// of the process's open files usually ends it first).
//
// Mappings are reference counted: a batch that holds a Buffer keeps its
// memory mapped even if the registration ends meanwhile.
//
// A client may shrink its file after registering; touching the lost pages
// would raise SIGBUS in the daemon. A SIGBUS handler covers every live
// mapping: it maps anonymous zero pages over the lost range, so the access
// completes (the data goes nowhere) instead of killing the daemon.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>

#include "common/mutex.h"
#include "common/status.h"

namespace kvfs::fuse {

// One registered mapping; unmapped when the last holder lets go.
class MappedBuffer {
 public:
  // Maps `len` bytes of `fd` shared, read-write. `page_bytes` is the file's
  // page size (hugetlbfs pages are larger than 4 KiB).
  static Result<std::shared_ptr<MappedBuffer>> Map(int fd, uint64_t len, uint64_t page_bytes);
  ~MappedBuffer();
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;

  char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  MappedBuffer(char* data, uint64_t size, int guard_slot)
      : data_(data), size_(size), guard_slot_(guard_slot) {}
  char* const data_;
  const uint64_t size_;
  const int guard_slot_;  // index in the SIGBUS guard's table
};

// Who registers: the calling thread's process and credentials.
struct Registrant {
  pid_t tgid = 0;
  uint32_t uid = 0;
};

// The open file of the mount a registration hangs on (file and directory
// handles are numbered separately, so the kind is part of the key).
struct OwnerFile {
  uint64_t fh = 0;
  bool dir = false;
  bool operator<(const OwnerFile& o) const { return fh != o.fh ? fh < o.fh : dir < o.dir; }
};

class BufferRegistry {
 public:
  BufferRegistry() = default;
  // Unmaps what no batch holds any more.
  ~BufferRegistry();
  BufferRegistry(const BufferRegistry&) = delete;
  BufferRegistry& operator=(const BufferRegistry&) = delete;

  // Registers `fd` of `who` (see the file comment). Returns a non-zero id,
  // never reused. Errors: EINVAL (length 0, not a multiple of 4096 or of the
  // file's page size, above KVFS_REGISTER_MAX_BYTES; not a regular file on
  // tmpfs/hugetlbfs; file shorter than `length`), EBADF (no such fd),
  // EACCES (fd not opened O_RDWR), EPERM (another uid's file), EMFILE (the
  // process has KVFS_MAX_REGISTRATIONS), ESRCH (process gone), ENOMEM.
  Result<uint64_t> Register(const Registrant& who, int fd, uint64_t length, OwnerFile owner);
  // EBADF unless `id` is a live registration of process `tgid`.
  Status Unregister(pid_t tgid, uint64_t id);
  // The mapping of registration `id` of process `tgid`; EBADF otherwise.
  Result<std::shared_ptr<MappedBuffer>> Find(pid_t tgid, uint64_t id);
  // Ends every registration made through `owner` (its last close).
  void DropOwner(OwnerFile owner);
  // Live registrations, after ending those of exited processes.
  size_t Live();

  // Implementation details follow.
 private:
  struct Registration {
    pid_t tgid = 0;
    OwnerFile owner;
    std::shared_ptr<MappedBuffer> buffer;
  };
  struct Process {
    int pidfd = -1;  // readable once the process has exited
    size_t registrations = 0;
  };
  // Ends the registrations of processes that exited.
  void SweepLocked() REQUIRES(mu_);
  // Ends the registrations of `tgid` if it has exited (its number may have
  // been reused since). Returns true if it had.
  bool ReapIfGoneLocked(pid_t tgid) REQUIRES(mu_);
  void EraseLocked(std::map<uint64_t, Registration>::iterator it) REQUIRES(mu_);

  Mutex mu_;
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Registration> by_id_ GUARDED_BY(mu_);
  std::map<pid_t, Process> processes_ GUARDED_BY(mu_);
};

// Lets SIGBUS reach the calling thread (libfuse workers block every
// signal, and a blocked fault signal kills the process instead of running
// the handler). Call on a thread before it touches registered memory.
void UnblockFaultSignals();

// The thread group (process) of thread `tid`, from /proc/TID/status.
// ESRCH if it is gone.
Result<pid_t> TgidOf(pid_t tid);

}  // namespace kvfs::fuse
