// UringTransport: FUSE over io_uring (Linux 6.14+) under libfuse 3.14, which
// knows only /dev/fuse.
//
// libfuse reads and writes the session's device through hooks
// (fuse_session_custom_io); this class owns them:
//   - On the INIT request (read from /dev/fuse) it notes whether the kernel
//     offers FUSE_OVER_IO_URING; in libfuse's INIT reply it accepts it.
//   - Once that reply is written it starts one queue per possible CPU
//     (fuse/uring_queue.h): a thread pinned to the CPU, owning a ring with
//     `entries_per_queue` registered request buffers. From then on the
//     kernel puts every request (forgets and interrupts aside) in an entry of
//     the requesting CPU's queue, and the queue thread hands it to
//     fuse_session_process_buf as if it came from /dev/fuse.
//   - A reply libfuse writes for a ring request (from any thread: kvfs
//     replies from I/O completions) is copied into that request's entry and
//     committed by the entry's queue thread, which also fetches the next
//     request in the same command. Every other write (replies to requests
//     read from /dev/fuse, notifications) goes to the device as before.
// The /dev/fuse request loop (fuse/request_loop.h) keeps running: it serves
// INIT, forgets, interrupts, and everything before the ring is ready; the
// queues run inline what it would run on its receiver and give the rest to
// its workers.
//
// Lifetime: Install() after fuse_session_mount(), before the first request.
// Stop() after the request loop ended: it waits until every request a queue
// took has been replied to and committed, then closes the rings (which
// cancels the kernel's hold on them, so closing /dev/fuse can end the
// connection). kill -9 needs nothing: the kernel drops rings and device.
//
// Thread safety: the hooks run on any thread; Attach/Stop on the mount's.
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace kvfs::fuse {

class Passthrough;
class RequestLoop;
class UringQueue;
struct UringEntry;

enum class Transport {
  kAuto,   // io_uring when the kernel offers it, else /dev/fuse
  kUring,  // io_uring or no mount
  kDev,    // /dev/fuse only
};

const char* TransportName(Transport t);

// Whether this kernel can carry FUSE over io_uring now: OK, or why not
// (EOPNOTSUPP: not built in; EPERM: built in but switched off, with the
// command that switches it on).
Status UringAvailable();

class UringTransport {
 public:
  struct Options {
    bool required = false;          // transport=uring: a refused ring ends the mount
    unsigned entries_per_queue = 16;
    std::chrono::microseconds spin{50};
    // Largest READ/WRITE request offered to the kernel when the ring is
    // accepted (libfuse 3.14 stops at 1 MiB; above it the kernel's
    // fs.fuse.max_pages_limit must allow it). Multiple of 4 KiB.
    uint32_t max_request = 1 << 20;
    // Shown the INIT request and reply (fuse/passthrough.h), if set.
    Passthrough* passthrough = nullptr;
  };

  // Installs the hooks on `se` (mounted; its userdata a SessionState whose
  // `uring` must point at the result before the first request).
  static Result<std::unique_ptr<UringTransport>> Install(fuse_session* se, const Options& options);
  ~UringTransport();
  UringTransport(const UringTransport&) = delete;
  UringTransport& operator=(const UringTransport&) = delete;

  // The request loop whose workers run the requests that may wait, and
  // which ends the mount if the ring fails. Before requests arrive.
  void Attach(RequestLoop* loop) { loop_ = loop; }

  // True once INIT negotiated io_uring and every queue registered.
  bool active() const { return active_.load(std::memory_order_acquire); }
  // "io_uring (N queues x M entries)" or "/dev/fuse".
  std::string Describe() const;

  // See the header comment. Idempotent.
  void Stop();

  // --- for the hooks and the queues.
  ssize_t Writev(int fd, iovec* iov, int count);
  ssize_t Read(int fd, void* buf, size_t len);
  // A queue took a request into `e`: replies with e's unique go to e.
  void Track(UringEntry* e, uint64_t unique);
  RequestLoop* loop() const { return loop_; }
  fuse_session* session() const { return se_; }
  int device_fd() const { return fd_; }
  // A queue failed after INIT accepted the ring: the mount cannot serve.
  void Fail(const std::string& why);

 private:
  UringTransport(fuse_session* se, const Options& o);
  // Patches libfuse's INIT reply (iov[1]) to accept the ring if offered.
  ssize_t WriteInitReply(int fd, iovec* iov, int count);
  // A /dev/fuse read once requests may exceed libfuse's buffer: see Read.
  ssize_t ReadLarge(int fd, void* buf, size_t len);
  void StartQueues(uint32_t payload_bytes);
  UringEntry* Untrack(uint64_t unique);

  fuse_session* const se_;
  const Options options_;
  int fd_ = -1;
  RequestLoop* loop_ = nullptr;

  // INIT, seen by the read hook (the receiver thread) and used by the
  // writev hook on the same thread.
  uint64_t init_unique_ = 0;
  bool init_offered_ = false;
  std::atomic<bool> init_done_{false};  // read by every writev
  // Set with the INIT reply if it raised max_write past libfuse's buffer:
  // /dev/fuse reads then go through `large_buf_` (receiver thread only).
  bool large_requests_ = false;
  std::unique_ptr<char[]> large_buf_;
  size_t large_buf_size_ = 0;

  std::atomic<bool> tracking_{false};  // queues may hold requests
  std::atomic<bool> active_{false};
  std::atomic<bool> stopped_{false};
  std::vector<std::unique_ptr<UringQueue>> queues_;

  // unique -> entry of every ring request not yet replied to; sharded so
  // that replies from many threads rarely meet on a lock.
  static constexpr size_t kShards = 16;
  struct Shard {
    std::mutex mu;
    std::unordered_map<uint64_t, UringEntry*> by_unique;  // GUARDED_BY(mu)
  };
  Shard shards_[kShards];
};

}  // namespace kvfs::fuse
