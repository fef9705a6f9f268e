// CacheRegistrar: registers pieces of the RAM cache's memory with the io
// engine (Volume::RegisterMemory), on a thread of its own.
//
// The arena makes each piece's pages before it hands the piece over
// (common/buddy_arena.h): registering then only pins pages that exist
// (0.2-0.6 ms per 64 MiB), while it holds each ring's submission lock.
// Until its piece is registered, I/O into the cache works unregistered (the
// engine only uses READ_FIXED for memory it has registered).
//
// Thread safety: Enqueue from any thread (it only queues). Stop() before
// the memory goes (the destructor does): the engine must not keep a
// registration of unmapped memory. What is enqueued after Stop() is dropped.
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

  // Queues [base, base + len) for registration; its pages must exist.
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
