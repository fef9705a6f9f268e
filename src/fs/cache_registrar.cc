#include "fs/cache_registrar.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <chrono>

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
    // The pages are made first, here: registering pins them while it holds
    // each ring's submission lock, and making 64 MiB of huge pages there
    // (zeroing, compaction) stalled every submission on that ring for
    // 50-140 ms. Pinning pages that exist takes a few milliseconds.
    const auto t0 = std::chrono::steady_clock::now();
    // It leaves the bytes of pages that exist as they are: blocks of the
    // piece may be in use already. Before Linux 5.14 it fails (EINVAL), and
    // the registration below makes the pages, as it always did.
    madvise(const_cast<char*>(base), len, MADV_POPULATE_WRITE);
    const auto t1 = std::chrono::steady_clock::now();
    // Without room in RLIMIT_MEMLOCK (not root) the cache works unregistered.
    Status st = volume_.RegisterMemory(base, len);
    spdlog::debug("cache registrar: {} bytes made in {} us, registered in {} us", len,
                  std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count(),
                  std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - t1).count());
    if (st.ok()) registered_.emplace_back(base, len);
    if (!st.ok() && !std::exchange(warned_, true)) {
      spdlog::warn("RAM cache memory is not registered with io_uring, reads will be slower: {}",
                   st.ToString());
    }
    l.lock();
  }
}

}  // namespace kvfs::fs
