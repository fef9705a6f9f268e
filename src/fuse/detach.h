// Detacher: runs the daemon in the background the way mount(8) expects:
// the command returns when the file system is mounted (exit 0) or when
// starting failed (the daemon's non-zero status, its one-line reason
// already printed on the command's stderr).
//
// Forking happens before anything starts a thread (fork keeps only the
// calling thread), so the daemon opens the volume and mounts after it.
//
//   KVFS_ASSIGN_OR_RETURN(Detacher d, Detacher::Fork());  // parent never returns
//   ... open, mount; on error print and exit non-zero ...
//   d.Ready();   // parent exits 0; stdio now /dev/null
//
// Thread safety: Fork() with no other thread running; Ready() once.
#pragma once

#include "common/status.h"

namespace kvfs::fuse {

class Detacher {
 public:
  // In the parent: waits for the child's Ready() (exit 0) or its exit (exit
  // with its status) and never returns. In the child: returns a Detacher,
  // in a new session (setsid). Fails (no child) with fork/pipe's errno.
  static Result<Detacher> Fork();
  Detacher(Detacher&& o) noexcept : ready_fd_(o.ready_fd_) { o.ready_fd_ = -1; }
  Detacher& operator=(Detacher&&) = delete;
  ~Detacher();

  // Lets the parent exit 0, then points stdin, stdout and stderr at
  // /dev/null and changes to /.
  void Ready();

 private:
  explicit Detacher(int ready_fd) : ready_fd_(ready_fd) {}
  int ready_fd_ = -1;  // write end of the pipe the parent waits on
};

}  // namespace kvfs::fuse
