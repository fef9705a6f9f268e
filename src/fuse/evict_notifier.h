// EvictNotifier: drops the names fs/ evicts (fs/eviction.h) from the
// kernel's caches, so a client's next stat of one is ENOENT at once, not a
// cached hit for up to entry_timeout, and inotify watchers see IN_DELETE.
//
// fs/ tells it of each eviction on a thread of its own holding no fs/ lock;
// it sends FUSE_NOTIFY_DELETE (fuse_lowlevel_notify_delete) there. That
// call takes the parent directory's lock in the kernel, so it can block
// behind a request on that directory; at teardown, a request the loop no
// longer serves would hold it for good. Stop() therefore waits a bounded
// time and says whether a notification is still stuck, and the Mount then
// leaves the session (and its fd) alone rather than free it under the call.
//
// Thread safety: Notify (the listener) may run on any thread, concurrently
// with Stop; the notifier outlives both through the shared_ptr the
// listener holds.
#pragma once

#include <fuse_lowlevel.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "common/mutex.h"
#include "fs/file_system.h"

namespace kvfs::fuse {

class EvictNotifier {
 public:
  // Installs the listener on `fs` (which keeps a reference to the notifier).
  static std::shared_ptr<EvictNotifier> Install(fs::FileSystem& fs, fuse_session* se);

  // From now on, evictions are not notified. True once no notification is
  // in progress; false if one is still blocked after `wait`.
  bool Stop(std::chrono::milliseconds wait);

  void Notify(uint64_t parent, std::string_view name, uint64_t ino);

 private:
  explicit EvictNotifier(fuse_session* se) : se_(se) {}
  fuse_session* const se_;
  Mutex mu_;
  CondVar idle_;
  bool stopped_ GUARDED_BY(mu_) = false;
  int busy_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvfs::fuse
