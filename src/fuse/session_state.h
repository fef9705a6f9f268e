// SessionState: what every FUSE handler of one mount shares -- the
// FileSystem, the kernel cache timeouts, and the count of replies still owed
// by fs/ callbacks. Handlers reach it through fuse_req_userdata().
//
// Thread safety: the FileSystem and PendingReplies are safe from any thread;
// `fs` and `timeouts` are fixed before the mount.
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "common/mutex.h"
#include "fs/batch.h"
#include "fs/file_system.h"
#include "fuse/buffer_registry.h"
#include "fuse/read_priority.h"

namespace kvfs::fuse {

class AsyncReply;
class Passthrough;
class UringTransport;

// How long the kernel may trust what we tell it. kvfs is the only writer of
// its volume, so nothing changes behind the kernel's back and long timeouts
// are safe; they save a round trip per stat() of a known name.
struct CacheTimeouts {
  double entry_s = 10.0;     // name -> inode
  double attr_s = 10.0;      // inode attributes
  double negative_s = 10.0;  // "name does not exist" (0 disables)
};

// Counts requests whose reply an fs/ callback still owes (Read, Fsync), so
// the session is destroyed only after the last of them replied: a reply
// writes to the session's /dev/fuse fd.
class PendingReplies {
 public:
  void Add();
  void Done();
  // Returns once the count is zero (logs while it waits long).
  void WaitNone();

 private:
  Mutex mu_;
  CondVar zero_;
  uint64_t count_ GUARDED_BY(mu_) = 0;
};

// Cancellation of requests the kernel interrupts (the caller gave up, e.g.
// killed). A request registers the flag fs/ watches; libfuse's interrupt
// callback sets it. The flags live here, keyed by request, rather than in
// the callback's data pointer: libfuse may run that callback while the
// request is being replied to, after its own state would be gone.
class Interrupts {
 public:
  // Watches `req` for an interrupt (at once if one already came): the
  // interrupt sets `flag` and drops the reads queued under it; with
  // `answer`, it also answers the request EINTR then (the caller gave up:
  // what the request waits for still ends, and its reply finds the
  // request answered).
  void Watch(fuse_req_t req, std::shared_ptr<std::atomic<bool>> flag,
             std::weak_ptr<AsyncReply> answer = {});
  // Stops watching; call before replying to `req`.
  void Forget(fuse_req_t req);

 private:
  struct Watched {
    std::shared_ptr<std::atomic<bool>> flag;
    std::weak_ptr<AsyncReply> answer;
  };
  static void OnInterrupt(fuse_req_t req, void* self);
  // Claims `answer`'s reply, if unclaimed, and replies EINTR.
  static void AnswerInterrupted(const std::weak_ptr<AsyncReply>& answer);
  Mutex mu_;
  std::unordered_map<fuse_req_t, Watched> flags_ GUARDED_BY(mu_);
};

struct SessionState {
  // A quarter of the request loop's worker threads may hold a write that
  // waits for reads; the rest stay free for the reads.
  SessionState(const CacheTimeouts& t, unsigned max_threads)
      : timeouts(t), read_priority([max_threads] {
          ReadPriority::Options o;
          o.max_waiting = max_threads / 4;
          return o;
        }()) {}
  // Set before the mount, so before any request arrives; never changes
  // afterwards.
  fs::FileSystem* fs = nullptr;
  const CacheTimeouts timeouts;
  PendingReplies pending;
  Interrupts interrupts;
  // Writes wait while another caller reads (fuse/read_priority.h).
  ReadPriority read_priority;
  // kvfs checks permissions itself (fuse/permissions.h): the mount has no
  // default_permissions. Set before the mount.
  bool kvfs_permissions = false;
  // The libfuse session, for notifications to the kernel (the batch ioctl
  // changes names behind the kernel's dentry cache). Set once, right after
  // the session is made, before any request.
  fuse_session* session = nullptr;
  // FUSE over io_uring, when the mount asked for it (fuse/uring_transport.h);
  // set right after the session is mounted, before any request.
  UringTransport* uring = nullptr;
  // FUSE passthrough (fuse/passthrough.h); set before the mount, never null
  // once requests arrive.
  Passthrough* passthrough = nullptr;
  // The largest READ the kernel may send: the max_read mount option, which
  // INIT must repeat (libfuse refuses the connection otherwise).
  uint32_t max_read = 1u << 20;
  // The batch ioctl's registered memory and its runner (made at the first
  // batch; destroyed before the registry, after every batch replied).
  BufferRegistry registry;
  std::once_flag batch_once;
  std::unique_ptr<fs::BatchRunner> batch;
};

inline SessionState& StateOf(fuse_req_t req) {
  return *static_cast<SessionState*>(fuse_req_userdata(req));
}

}  // namespace kvfs::fuse
