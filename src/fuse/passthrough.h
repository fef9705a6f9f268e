// Passthrough: opens the kernel serves itself from a file's memory (FUSE
// passthrough, Linux 6.9+), so a load's read() is one kernel copy in the
// caller's thread and no request reaches the daemon.
//
//   - INIT: where the mount allows it (-o passthrough=auto, root) and the
//     kernel offers FUSE_PASSTHROUGH, the INIT reply accepts it. The
//     transport's hooks (fuse/uring_transport.h) show this class the INIT
//     request and reply; on /dev/fuse alone it installs hooks of its own.
//   - Export: a file memory (fs/file_memory.h) is registered with the
//     kernel once (BACKING_OPEN on /dev/fuse); the id is released when the
//     memory is freed.
//   - OPEN: fs::FileSystem::OpenServed decides which opens are served (the
//     kernel's rule: all of a file's opens or none); ReplyOpen answers them.
//
// Thread safety: the INIT calls run on the receiving thread before any
// other request; everything else from any thread.
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <memory>
#include <string>

#include "common/status.h"

namespace kvfs::fs {
class FileMemory;
}

namespace kvfs::fuse {

enum class PassthroughMode { kAuto, kOff };

class Passthrough {
 public:
  explicit Passthrough(PassthroughMode mode);
  ~Passthrough();

  // Whether file memory is worth making: the mode allows passthrough and
  // the daemon could use it (root). Known before INIT.
  bool may_activate() const;
  // For a mount without the io_uring transport's hooks: installs
  // read/writev hooks that only see INIT (session userdata: SessionState).
  Status InstallHooks(fuse_session* se);

  // The INIT request, as read from /dev/fuse (`n` bytes from the header).
  void NoteInitRequest(const void* buf, size_t n);
  // libfuse's INIT reply body (`len` bytes of fuse_init_out): accepts
  // passthrough when allowed and offered. `fd` is the session's /dev/fuse.
  void EditInitReply(void* init_out, size_t len, int fd);

  // True once INIT accepted it.
  bool active() const { return active_.load(std::memory_order_acquire); }
  // "on" or "off (why)", for the startup log and the stats.
  std::string Describe() const;

  // Registers `m` with the kernel (once per memory). False if the kernel
  // refused: the open is then served through READ replies.
  bool Export(fs::FileMemory& m);
  // Answers an OPEN served from `m` (exported). Returns fuse_reply's code
  // (-ENOENT: the open was interrupted; no release will come).
  int ReplyOpen(fuse_req_t req, uint64_t fh, fs::FileMemory& m, int flags);

  // The session's fd is about to close: memory freed later releases no id.
  void Detach() { fd_->store(-1); }

  uint64_t exports() const { return exports_.load(std::memory_order_relaxed); }
  uint64_t export_failures() const { return export_failures_.load(std::memory_order_relaxed); }

  // The hooks' work (Passthrough's own hooks, /dev/fuse transport).
  ssize_t Read(int fd, void* buf, size_t len);
  ssize_t Writev(int fd, struct iovec* iov, int count);

 private:
  const PassthroughMode mode_;
  uint64_t init_unique_ = 0;
  uint64_t offered_ = 0;  // INIT's flags | flags2 << 32
  std::atomic<bool> init_done_{false};
  std::atomic<bool> active_{false};
  std::string why_off_ = "not negotiated yet";
  // The /dev/fuse fd for BACKING_OPEN/CLOSE; -1 once the session is gone
  // (a memory freed later releases nothing: the kernel dropped all ids).
  std::shared_ptr<std::atomic<int>> fd_ = std::make_shared<std::atomic<int>>(-1);
  std::atomic<uint64_t> exports_{0}, export_failures_{0};
};

}  // namespace kvfs::fuse
