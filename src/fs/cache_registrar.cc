#include "fs/cache_registrar.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace kvfs::fs {

CacheRegistrar::CacheRegistrar(volume::Volume& volume) : volume_(volume) {
  thread_ = std::thread([this] { Run(); });
}

CacheRegistrar::~CacheRegistrar() { Stop(); }

void CacheRegistrar::Enqueue(const char* base, size_t len) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
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
  for (const auto& [base, len] : registered_) volume_.UnregisterMemory(base, len);
  registered_.clear();
}

void CacheRegistrar::Run() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    auto [base, len] = queue_.front();
    queue_.pop_front();
    l.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    // Without room in RLIMIT_MEMLOCK (not root) the cache works unregistered.
    Status st = volume_.RegisterMemory(base, len);
    spdlog::debug("cache registrar: {} bytes registered in {} us", len,
                  std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - t0).count());
    if (st.ok()) registered_.emplace_back(base, len);
    if (!st.ok() && !std::exchange(warned_, true)) {
      spdlog::warn("RAM cache memory is not registered with io_uring, reads will be slower: {}",
                   st.ToString());
    }
    l.lock();
  }
}

}  // namespace kvfs::fs
