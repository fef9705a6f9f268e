// CrashGuard: a small process beside the daemon that ends the FUSE
// connection when the daemon dies without unmounting (kill -9, a crash).
//
// Why: the kernel ends a connection when /dev/fuse is closed, and a killed
// process closes its files only once its last thread has exited. A daemon
// thread inside a kernel notification (notify_inval_entry after a batch
// WRITE, notify_delete after an eviction) waits, uninterruptibly, for the
// directory's lock, and that lock's holder may be a client whose request
// the dead daemon will never answer (a create, a rename, an fsync of the
// directory). Without the guard that thread never returns: the daemon
// never finishes exiting, the client never returns, the mount hangs until
// someone aborts the connection by hand.
//
// The guard is this same program run again (`kvfs --crash-guard ...`, by
// vfork and exec, so the daemon's memory is not shared copy-on-write with
// it). The kernel tells it when the thread that started it exits
// (PR_SET_PDEATHSIG); unless it was told first that the unmount is clean,
// it writes to the connection's abort file in fusectl
// (/sys/fs/fuse/connections/N/abort, mounting fusectl if it must and may):
// the clients' requests fail with ENOTCONN, as they would from a daemon
// that died without blocking, the locks go, the daemon's last thread exits.
//
//   auto guard = CrashGuard::Start("/mnt/kv");  // after mounting, from the
//                                              // thread that serves to the end
//   ...
//   guard.Disarm();   // after the clean unmount
//
// Thread safety: one thread starts and disarms a guard, and must live as
// long as the mount is served (its exit is what fires the guard).
#pragma once

#include <sys/types.h>

#include <string>

namespace kvfs::fuse {

class CrashGuard {
 public:
  CrashGuard() = default;
  // Starts the guard of the FUSE mount at `mountpoint` (absolute, mounted).
  // Never fails: where the abort file cannot be found or written (fusectl
  // not mounted and not root), logs why and returns a guard that does
  // nothing.
  static CrashGuard Start(const std::string& mountpoint);
  CrashGuard(CrashGuard&& o) noexcept : pid_(o.pid_), fd_(o.fd_) { o.pid_ = -1, o.fd_ = -1; }
  CrashGuard& operator=(CrashGuard&& o) noexcept;
  ~CrashGuard() { Disarm(); }

  // Tells the guard the daemon ends cleanly and waits for it to exit.
  void Disarm();
  // Leaves the guard armed and forgets it: it fires when the starting
  // thread exits (a daemon that cannot end its session cleanly).
  void Leave();
  bool armed() const { return pid_ > 0; }

  // The guard process's main: `argv` is {"--crash-guard", parent pid,
  // abort file}. Returns the exit status.
  static int Main(int argc, char** argv);

 private:
  pid_t pid_ = -1;
  int fd_ = -1;  // write end of the pipe the guard reads "clean" from
};

// The fusectl name of the FUSE connection mounted at `mountpoint`
// (/proc/self/mountinfo), or "" if none is mounted there.
std::string FuseConnectionOf(const std::string& mountpoint);

}  // namespace kvfs::fuse
