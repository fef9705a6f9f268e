// Replies: the one place where a kvfs Status leaves for the kernel, and the
// conversions from fs/ types to what libfuse sends.
//
// Every handler ends in exactly one fuse_reply_* call, made holding no lock
// (the reply may be the kernel's last use of an inode and trigger a FORGET
// on another thread). std::bad_alloc never crosses this boundary: NoThrow()
// turns it into ENOMEM.
#pragma once

#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <memory>
#include <new>
#include <type_traits>

#include "common/status.h"
#include "fs/file_system.h"
#include "fuse/session_state.h"

namespace kvfs::fuse {

// Replies with st.code() (0 when OK: success for ops that return no data).
// `op` names the operation in the debug log. Returns fuse_reply_err's result.
int ReplyStatus(fuse_req_t req, const Status& st, const char* op);

// The entry for a lookup/mkdir/create-style reply: `attr` (which carries one
// kernel lookup reference) with the mount's timeouts.
fuse_entry_param EntryParam(const fs::Attr& attr, const CacheTimeouts& t);
struct stat ToStat(const fs::Attr& attr);
struct statvfs ToStatvfs(const fs::FsStats& s);

// Who sent `req`: uid, gid, pid (the calling thread), and with
// `with_groups` its supplementary groups (read from /proc by libfuse: only
// the batch ioctl, which checks permissions itself, needs them). May throw
// std::bad_alloc with `with_groups`.
fs::Caller CallerOf(fuse_req_t req, bool with_groups = false);

// The kill-priv rule's view of `req`'s caller (fs/killpriv.h), or null for
// root (kvfs takes uid 0 for CAP_FSETID, as a local filesystem's root):
// group membership is read from /proc only if the rule asks. `out` holds
// it; valid while `req` is being served.
fs::KillPriv* UnprivilegedCaller(fuse_req_t req, fs::KillPriv* out);

// Tells the kernel that inode `ino`'s attributes it caches are stale (a
// mode kvfs changed by itself); logs a failure other than "not cached".
void InvalidateAttrs(fuse_req_t req, fuse_ino_t ino);

// Runs f() and returns its Result/Status; std::bad_alloc becomes ENOMEM.
// ("out of memory" fits std::string's small buffer: making it allocates
// nothing.)
template <typename F>
auto NoThrow(F&& f) noexcept -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Status::Error(ENOMEM, "out of memory");
  }
}

// For fs/ calls that return nothing: OK, or ENOMEM on std::bad_alloc.
template <typename F>
Status NoThrowVoid(F&& f) noexcept {
  try {
    f();
    return Status::OK();
  } catch (const std::bad_alloc&) {
    return Status::Error(ENOMEM, "out of memory");
  }
}

// The reply owed for one request whose work finishes in an fs/ callback,
// possibly on another thread. Shared by the handler and the callback; the
// first to Claim() it replies. If every holder lets go without claiming
// (an fs/ bug: a callback dropped), the destructor replies EIO so the
// caller is not left hanging. Counts itself in PendingReplies while alive.
class AsyncReply {
 public:
  // How an interrupt of the request (the kernel's FUSE_INTERRUPT: the
  // caller got a signal) is taken.
  enum class OnInterrupt {
    kIgnore,  // the reply comes when the work ends
    kCancel,  // cancel_flag() is set and reads queued under it are dropped
    kAnswer,  // answered EINTR at once; the work ends on its own, and its
              // reply finds the request answered (Claim() is false)
  };
  // May throw std::bad_alloc (before anything is owed by anyone else).
  static std::shared_ptr<AsyncReply> Start(fuse_req_t req, const char* op,
                                           OnInterrupt on_interrupt = OnInterrupt::kIgnore);
  ~AsyncReply();
  AsyncReply(const AsyncReply&) = delete;
  AsyncReply& operator=(const AsyncReply&) = delete;

  // True exactly once: the caller must then reply to req().
  bool Claim();
  fuse_req_t req() const { return req_; }
  const char* op() const { return op_; }
  // Set when the kernel interrupts the request (null unless cancellable).
  const std::shared_ptr<std::atomic<bool>>& cancel_flag() const { return cancel_; }

 private:
  AsyncReply(fuse_req_t req, const char* op, SessionState& state)
      : req_(req), op_(op), state_(state) {}
  const fuse_req_t req_;
  const char* const op_;
  SessionState& state_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  std::atomic<bool> claimed_{false};
  bool armed_ = false;  // set once by Start(), before the object is shared
};

}  // namespace kvfs::fuse
