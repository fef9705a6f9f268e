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
    std::lock_guard<std::mutex> l(mu_);
    dirty_.push_back(std::move(pin));
    ++added_;
    early = dirty_.size() == kEarlyFlush;
  }
  if (early) cv_.notify_all();
}

void AtimeLog::Flush() {
  std::lock_guard<std::mutex> f(flush_mu_);
  std::vector<InodePin> pins;
  uint64_t covered;
  {
    std::lock_guard<std::mutex> l(mu_);
    pins.swap(dirty_);
    covered = added_;
  }
  if (pins.empty()) return;
  flush_(std::move(pins));
  flushes_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> l(mu_);
    flushed_ = std::max(flushed_, covered);
  }
  cv_.notify_all();
}

void AtimeLog::WaitFlushed() {
  std::unique_lock<std::mutex> l(mu_);
  const uint64_t target = added_;
  cv_.wait(l, [&] { return stop_ || flushed_ >= target; });
}

void AtimeLog::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void AtimeLog::Run() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    cv_.wait_for(l, interval_, [&] { return stop_ || dirty_.size() >= kEarlyFlush; });
    if (stop_) break;
    if (dirty_.empty()) continue;
    l.unlock();
    Flush();
    l.lock();
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
      std::lock_guard<std::mutex> l(p->mu);
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
