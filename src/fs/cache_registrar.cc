#include "fs/cache_registrar.h"

#include <spdlog/spdlog.h>

namespace kvfs::fs {

CacheRegistrar::CacheRegistrar(volume::Volume& volume) : volume_(volume) {
  thread_ = std::thread([this] { Run(); });
}

CacheRegistrar::~CacheRegistrar() { Stop(); }

void CacheRegistrar::Enqueue(const char* base, size_t len) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.emplace_back(base, len);
  }
  cv_.notify_one();
}

void CacheRegistrar::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void CacheRegistrar::Run() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    auto [base, len] = queue_.front();
    queue_.pop_front();
    l.unlock();
    // Without room in RLIMIT_MEMLOCK (not root) the cache works unregistered.
    Status st = volume_.RegisterMemory(base, len);
    if (!st.ok() && !std::exchange(warned_, true)) {
      spdlog::warn("RAM cache memory is not registered with io_uring, reads will be slower: {}",
                   st.ToString());
    }
    l.lock();
  }
}

}  // namespace kvfs::fs
