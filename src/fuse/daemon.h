// Mount: one libfuse low-level session serving a fs::FileSystem at a
// mountpoint, from setup to teardown.
//
//   BlockTerminationSignals();            // first thing in main()
//   KVFS_ASSIGN_OR_RETURN(auto m, Mount::Create(options, &args));  // checks options
//   ... open the Volume and the FileSystem ...
//   KVFS_RETURN_IF_ERROR(m->MountAt(*fs, "/mnt/kv"));
//   Status st = m->Run();                  // until unmounted or signalled
//   m.reset();                             // unmounted, session gone
//   fs->Shutdown();                        // staged data out, index synced
//
// Create() comes first so that bad options fail before the volume is
// opened (and before the daemon forks, see fuse/detach.h).
//
// Signals: SIGTERM, SIGINT and SIGHUP end Run(), which takes them from a
// signalfd. So main() blocks them before any thread exists -- threads
// inherit the mask, the I/O engine's and RocksDB's included -- and no
// handler runs in the middle of a request.
//
// libfuse's messages: while Create() and MountAt() run, they become the
// context of the Status returned; otherwise they go to spdlog, except
// debug output (-d), which goes to stderr as libfuse writes it.
//
// Thread safety: one thread creates, runs and destroys a Mount.
#pragma once

#include <fuse_lowlevel.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "fs/file_system.h"
#include "fuse/crash_guard.h"
#include "fuse/evict_notifier.h"
#include "fuse/passthrough.h"
#include "fuse/session_state.h"
#include "fuse/uring_transport.h"

namespace kvfs::fuse {

struct MountOptions {
  CacheTimeouts timeouts;
  // Threads for the requests that may wait (writes wait for staging
  // memory); the others run on the receiving thread (fuse/request_loop.h).
  unsigned max_threads = 64;
  // How long the receiving thread keeps polling for the next request
  // before it sleeps, microseconds (0: it sleeps at once).
  unsigned spin_us = 50;
  // How requests travel (fuse/uring_transport.h), and the ring entries of
  // each CPU's queue when they travel over io_uring. A request past the
  // entries waits in the kernel: with 16 per CPU, 64 threads loading while
  // 64 stored, on 2 CPUs, moved 0.7-0.85x what they moved with 64
  // (docs/performance.md). An entry's buffer is touched only when used.
  Transport transport = Transport::kAuto;
  unsigned uring_entries = 64;
  uint32_t max_request = 1 << 20;  // io_uring transport: largest read/write
  // Leave permission checks to the kernel (default_permissions) even where
  // kvfs could make them (fuse/permissions.h); always so before Linux 6.16.
  bool kernel_permissions = false;
  // Loads served by the kernel from file memory (fuse/passthrough.h).
  PassthroughMode passthrough = PassthroughMode::kAuto;
};

// The largest read and write request the kernel sends (FUSE's own limit is
// 256 pages).
inline constexpr unsigned kMaxRequestBytes = 1u << 20;

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and every thread
// it creates afterwards).
void BlockTerminationSignals();

// The handlers kvfs registers with libfuse (fuse/ops.h, and INIT's
// negotiation); the requests they serve are fuse/opcodes.h's rows.
fuse_lowlevel_ops Operations();

class Mount {
 public:
  // Creates the session over `args` (libfuse options; argv[0] is the
  // program name; kvfs adds default_permissions, max_read and, for root,
  // allow_other) and installs the signal handlers. Mounts nothing. EINVAL
  // with libfuse's reason for options it rejects; with transport kUring,
  // UringAvailable()'s error where the kernel cannot carry it.
  static Result<std::unique_ptr<Mount>> Create(const MountOptions& options, fuse_args* args);
  // Unmounts if mounted, restores the signal handlers, destroys the session.
  ~Mount();
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;

  // Mounts at `mountpoint` (absolute), serving `fs`, which must outlive the
  // Mount, and starts its crash guard (fuse/crash_guard.h): the calling
  // thread must serve (Run) and destroy the Mount. Call once. Fails with
  // libfuse's reason.
  Status MountAt(fs::FileSystem& fs, const std::string& mountpoint);

  // Serves requests (fuse/request_loop.h) until the file
  // system is unmounted (fusermount3 -u, umount) or a termination signal
  // arrives; returns after every request has been replied to. OK in both
  // cases; the loop's error otherwise. REQUIRES: MountAt() succeeded.
  Status Run();

 private:
  Mount() = default;
  std::unique_ptr<SessionState> state_;
  MountOptions options_;
  std::unique_ptr<UringTransport> uring_;  // outlives the session's fd
  std::unique_ptr<Passthrough> passthrough_;
  std::shared_ptr<EvictNotifier> notifier_;  // stopped before the session goes
  CrashGuard guard_;  // from the mount to the session's end
  fuse_session* se_ = nullptr;
  bool mounted_ = false;
};

}  // namespace kvfs::fuse
