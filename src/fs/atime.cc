#include "fs/atime.h"

#include <algorithm>

#include "fs/file_system_impl.h"

namespace kvfs::fs {

AtimeLog::AtimeLog(std::chrono::milliseconds interval, FlushFn flush)
    : interval_(interval), flush_(std::move(flush)), thread_([this] { Run(); }) {}

AtimeLog::~AtimeLog() { Stop(); }

void AtimeLog::Add(InodePin pin) {
  updates_.fetch_add(1, std::memory_order_relaxed);
  bool early;
  {
    MutexLock l(mu_);
    dirty_.push_back(std::move(pin));
    ++added_;
    early = dirty_.size() == kEarlyFlush;
  }
  if (early) cv_.NotifyAll();
}

void AtimeLog::Flush() {
  MutexLock f(flush_mu_);
  std::vector<InodePin> pins;
  uint64_t covered;
  {
    MutexLock l(mu_);
    pins.swap(dirty_);
    covered = added_;
  }
  if (pins.empty()) return;
  flush_(std::move(pins));
  flushes_.fetch_add(1, std::memory_order_relaxed);
  {
    MutexLock l(mu_);
    flushed_ = std::max(flushed_, covered);
  }
  cv_.NotifyAll();
}

void AtimeLog::WaitFlushed() {
  MutexLock l(mu_);
  const uint64_t target = added_;
  while (!stop_ && flushed_ < target) cv_.Wait(l);
}

void AtimeLog::Stop() {
  {
    MutexLock l(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void AtimeLog::Run() {
  MutexLock l(mu_);
  while (!stop_) {
    const auto deadline = std::chrono::steady_clock::now() + interval_;
    while (!stop_ && dirty_.size() < kEarlyFlush && cv_.WaitUntil(l, deadline)) {
    }
    if (stop_) break;
    if (dirty_.empty()) continue;
    l.Unlock();
    Flush();
    l.Lock();
  }
}

// ------------------------------------------------------ FileSystem::Impl

void FileSystem::Impl::NoteUse(const InodeRef& i, int64_t now_ns) {
  UsedForEviction(*i, now_ns);
  if (!AtimeDue(options_.atime, i->rec, now_ns)) return;
  i->rec.atime_ns = now_ns;
  if (i->atime_dirty) return;  // already logged, not yet flushed
  i->atime_dirty = true;
  atime_->Add(table_.Pin(i));
}

void FileSystem::Impl::FlushAtimes(std::vector<InodePin> pins) {
  std::shared_ptr<Change> c;
  for (InodePin& p : pins) {
    {
      MutexLock l(p->mu());
      // Captured by another change since (atime_dirty cleared), or gone.
      if (!p->atime_dirty || p->deleted) continue;
    }
    if (!c) c = NewChange();
    c->inodes.push_back(p.ref());
    if (c->inodes.size() == AtimeLog::kAtimeBatch) {
      Enqueue(c);
      c = nullptr;
    }
  }
  if (c) Enqueue(c);
  // `pins` go here; each change pins its own inodes until committed.
}

}  // namespace kvfs::fs
