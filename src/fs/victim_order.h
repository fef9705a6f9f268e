// VictimOrder: the order in which eviction (fs/eviction.h) picks the files
// it unlinks. It follows names (a NameObserver, told by NameChange: only
// named regular files are candidates) and uses; the rules of what may go
// now are not its business (fs/eviction_rules.h). The one implementation today is Recency
// (fs/recency.h), exact least recently used first.
//
// Uses reach it two ways: through a UseStamp it hands out per file, which
// the file's in-memory inode keeps (InodeState::use_stamp) so that a read
// records a use with one relaxed atomic store and no lock; and through
// Touch, for callers with an inode number only.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "fs/name_observer.h"

namespace kvfs::fs {

// The last use of one file, ns since the epoch (NowNs).
struct UseStamp {
  std::atomic<int64_t> ns{0};
  // Moves the stamp forward to `now_ns` (a racing earlier use loses).
  void Use(int64_t now_ns) {
    int64_t seen = ns.load(std::memory_order_relaxed);
    while (seen < now_ns && !ns.compare_exchange_weak(seen, now_ns, std::memory_order_relaxed)) {
    }
  }
};

class VictimOrder : public NameObserver {
 public:
  // A file the order offers, with what the order knew of it then.
  struct Candidate {
    uint64_t ino = 0;
    uint64_t parent = 0;
    std::string name;
    int64_t last_use_ns = 0;
    std::shared_ptr<UseStamp> stamp;  // moved past last_use_ns: used since
  };

  // The stamp of file `ino`, to be kept by its in-memory inode: a named
  // file's own, else one tracking nothing (its uses count for nothing).
  virtual std::shared_ptr<UseStamp> StampOf(uint64_t ino) = 0;
  // A use of `ino` at `now_ns`; nothing if it is not tracked.
  virtual void Touch(uint64_t ino, int64_t now_ns) = 0;
  // Up to `n` files in the order they should go, passing over those in
  // `pass_over` (files the caller looked at already).
  virtual std::vector<Candidate> Next(size_t n, const std::unordered_set<uint64_t>& pass_over) = 0;
  // Whether Next() returns files by last use, oldest first: then a file
  // used too recently ends a pass (every file after it was used later).
  virtual bool oldest_use_first() const = 0;
  // Files tracked.
  virtual size_t size() const = 0;
};

}  // namespace kvfs::fs
