// SessionState: what every FUSE handler of one mount shares -- the
// FileSystem, the kernel cache timeouts, and the count of replies still owed
// by fs/ callbacks. Handlers reach it through fuse_req_userdata().
//
// Thread safety: the FileSystem and PendingReplies are safe from any thread;
// `timeouts` is fixed before the session starts.
#pragma once

#include <fuse_lowlevel.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "fs/file_system.h"

namespace kvfs::fuse {

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
  std::mutex mu_;
  std::condition_variable zero_;
  uint64_t count_ = 0;  // GUARDED_BY(mu_)
};

struct SessionState {
  SessionState(fs::FileSystem& f, const CacheTimeouts& t) : fs(f), timeouts(t) {}
  fs::FileSystem& fs;
  const CacheTimeouts timeouts;
  PendingReplies pending;
};

inline SessionState& StateOf(fuse_req_t req) {
  return *static_cast<SessionState*>(fuse_req_userdata(req));
}

}  // namespace kvfs::fuse
