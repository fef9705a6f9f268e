// Mount: one libfuse low-level session serving a fs::FileSystem at a
// mountpoint, from setup to teardown.
//
//   BlockTerminationSignals();            // first thing in main()
//   ... open the Volume and the FileSystem ...
//   KVFS_ASSIGN_OR_RETURN(auto m, Mount::Create(fs, options, &args, mnt));
//   Status st = m->Run();                  // until unmounted or signalled
//   m.reset();                             // unmounted, session gone
//   fs->Shutdown();                        // staged data out, index synced
//
// Signals: SIGTERM, SIGINT and SIGHUP end Run(). They must reach the thread
// that calls Run() (libfuse's loop waits there), so main() blocks them
// before any thread exists -- threads inherit the mask, the I/O engine's and
// RocksDB's included -- and Run() unblocks them in its own thread only.
//
// Thread safety: one thread creates, runs and destroys a Mount.
#pragma once

#include <fuse_lowlevel.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "fs/file_system.h"
#include "fuse/session_state.h"

namespace kvfs::fuse {

struct MountOptions {
  CacheTimeouts timeouts;
  // libfuse worker threads. Reads and fsyncs do not hold one while the
  // device works, but writes may wait for staging memory.
  unsigned max_threads = 64;
};

// The largest read and write request the kernel sends (FUSE's own limit is
// 256 pages).
inline constexpr unsigned kMaxRequestBytes = 1u << 20;

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread (and every thread
// it creates afterwards).
void BlockTerminationSignals();

class Mount {
 public:
  // Creates the session over `args` (libfuse options; argv[0] is the
  // program name; kvfs adds default_permissions, max_read and, for root,
  // allow_other), installs the signal handlers and mounts at `mountpoint`
  // (absolute). `fs` must outlive the Mount. Fails with EINVAL for options
  // libfuse rejects, or the mount's error (libfuse prints its reason).
  static Result<std::unique_ptr<Mount>> Create(fs::FileSystem& fs, const MountOptions& options,
                                               fuse_args* args, const std::string& mountpoint);
  // Unmounts if still mounted, restores the signal handlers, destroys the
  // session.
  ~Mount();
  Mount(const Mount&) = delete;
  Mount& operator=(const Mount&) = delete;

  // Serves requests on up to options.max_threads threads until the file
  // system is unmounted (fusermount3 -u, umount) or a termination signal
  // arrives; returns after every request has been replied to. OK in both
  // cases; the loop's error otherwise.
  Status Run();

 private:
  Mount() = default;
  std::unique_ptr<SessionState> state_;
  MountOptions options_;
  fuse_session* se_ = nullptr;
  bool signals_set_ = false;
  bool mounted_ = false;
};

}  // namespace kvfs::fuse
