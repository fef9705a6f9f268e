#include "fuse/evict_notifier.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

namespace kvfs::fuse {

std::shared_ptr<EvictNotifier> EvictNotifier::Install(fs::FileSystem& fs, fuse_session* se) {
  std::shared_ptr<EvictNotifier> n(new EvictNotifier(se));
  fs.SetEvictionListener([n](uint64_t parent, std::string_view name, uint64_t ino) {
    n->Notify(parent, name, ino);
  });
  return n;
}

void EvictNotifier::Notify(uint64_t parent, std::string_view name, uint64_t ino) {
  {
    MutexLock l(mu_);
    if (stopped_) return;
    ++busy_;
  }
  // fs/ and FUSE share inode numbers (the root is 1 in both).
  const int rc = fuse_lowlevel_notify_delete(se_, parent, ino, name.data(), name.size());
  // ENOENT: the kernel had not cached the name (nothing to drop).
  if (rc != 0 && rc != -ENOENT) {
    spdlog::debug("eviction: notify_delete of inode {}: {}", ino, std::strerror(-rc));
  }
  {
    MutexLock l(mu_);
    --busy_;
  }
  idle_.NotifyAll();
}

bool EvictNotifier::Stop(std::chrono::milliseconds wait) {
  MutexLock l(mu_);
  stopped_ = true;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (busy_ != 0) {
    if (!idle_.WaitUntil(l, deadline)) return busy_ == 0;
  }
  return true;
}

}  // namespace kvfs::fuse
