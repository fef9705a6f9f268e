// CacheRegistrar: makes the pages of pieces of the RAM cache's memory and
// registers them with the io engine (Volume::RegisterMemory), on a thread
// of its own.
//
// Why a thread: making 64 MiB of huge pages (zeroing, compaction) takes
// ~64 ms on the dev VM, and registering then pins them (~0.3 ms). Done
// where the cache first uses a piece -- a lookup's prefetch on the thread
// that reads /dev/fuse -- it stalled every request behind it. Until its
// piece is registered, I/O into the cache works unregistered (the engine
// only uses READ_FIXED for memory it has registered).
//
// Thread safety: Enqueue from any thread (the arena calls it under its
// lock: it only queues). Stop() before the memory goes (the destructor
// does): the engine must not keep a registration of unmapped memory.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "volume/volume.h"

namespace kvfs::fs {

class CacheRegistrar {
 public:
  // `volume` must outlive the registrar.
  explicit CacheRegistrar(volume::Volume& volume);
  // Stop()s.
  ~CacheRegistrar();
  CacheRegistrar(const CacheRegistrar&) = delete;
  CacheRegistrar& operator=(const CacheRegistrar&) = delete;

  // Queues [base, base + len) for registration.
  void Enqueue(const char* base, size_t len);
  // Drops what is still queued, joins the thread (a registration under
  // way finishes first) and unregisters every piece it registered. Call it
  // only when no I/O into those pieces is in flight. Idempotent.
  void Stop();

 private:
  void Run();

  volume::Volume& volume_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<const char*, size_t>> queue_;  // GUARDED_BY(mu_)
  // Registered so far; only the registrar thread, then Stop(), touch it.
  std::vector<std::pair<const char*, size_t>> registered_;
  bool stop_ = false;                                 // GUARDED_BY(mu_)
  bool warned_ = false;  // only the registrar thread touches it
  std::thread thread_;
};

}  // namespace kvfs::fs
