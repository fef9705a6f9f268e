// Recency: the exact least-recently-used order of the regular files with a
// name, for the eviction policy (fs/eviction.h).
//
// Every tracked file has a node: its inode, the name eviction unlinks it by
// (the one it was created or renamed to) and a UseStamp, the time of its
// last use, which the file's in-memory inode shares (InodeState::use_stamp).
// A use (lookup, getattr, open, read, the batch's READ/STAT) is one relaxed
// atomic store into that stamp: no lock, O(1). The order is kept lazily and
// exactly: nodes sit in a set keyed by the stamp they had when last placed,
// which is never later than their real last use. Oldest() walks it from the
// old end; a node whose stamp moved is re-placed under its real stamp
// (O(log n), once per use epoch) and the walk goes on. A node reached whose
// stamp did not move is older than everything after it, so the files it
// returns are exactly the least recently used.
//
// The mutex guards the set and the map. It is taken by creates, renames and
// unlinks (already under the namespace lock), by the first use of a file
// loaded into memory (StampOf), by the batch's EXISTS (Touch, which has no
// inode at hand) and by the eviction pass; never by a read.
//
// Persisted coarsely: the order is rebuilt at mount from the atimes of the
// index's records (FileSystem::Impl::StartEviction), so it survives a
// remount at the atime's granularity (fs/atime.h).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
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

class Recency : public NameObserver {
 public:
  struct Entry {
    uint64_t ino = 0;
    uint64_t parent = 0;
    std::string name;
    int64_t last_use_ns = 0;
    std::shared_ptr<UseStamp> stamp;  // moved past last_use_ns: used since
  };

  // Tracks a file named `name` in `parent`, used at `now_ns` (a created or
  // renamed-over-its-target file). If tracked already: the new name, and
  // a use at `now_ns`.
  void Insert(uint64_t ino, uint64_t parent, std::string_view name, int64_t now_ns);
  // The stamp of file `ino`, shared with its in-memory inode: a tracked
  // file's own, else one tracking nothing (uses of it count for nothing).
  std::shared_ptr<UseStamp> StampOf(uint64_t ino);
  // A use of `ino` at `now_ns`, for callers without its inode; nothing if
  // it is not tracked.
  void Touch(uint64_t ino, int64_t now_ns);
  // The file now has this name (rename); its recency is unchanged.
  void Rename(uint64_t ino, uint64_t parent, std::string_view name);
  // The file lost its name (unlink, rename-over, eviction).
  void Remove(uint64_t ino);
  // Up to `n` files, least recently used first, passing over those in
  // `pass_over` (files the caller looked at already).
  std::vector<Entry> Oldest(size_t n, const std::unordered_set<uint64_t>& pass_over);
  size_t size() const;

  // NameObserver: the namespace's name changes, as Insert, Rename, Remove.
  void Named(uint64_t ino, uint64_t parent, std::string_view name, int64_t now_ns) override {
    Insert(ino, parent, name, now_ns);
  }
  void Moved(uint64_t ino, uint64_t parent, std::string_view name) override {
    Rename(ino, parent, name);
  }
  void Unnamed(uint64_t ino) override { Remove(ino); }

 private:
  struct Node {
    uint64_t parent = 0;
    std::string name;
    int64_t placed_ns = 0;  // its key in order_
    std::shared_ptr<UseStamp> stamp;
  };
  // Puts `ino` in order_ under its stamp's time. REQUIRES: mu_ held.
  void Place(uint64_t ino, Node& n);

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Node> nodes_;           // GUARDED_BY(mu_)
  std::set<std::pair<int64_t, uint64_t>> order_;       // (placed_ns, ino); GUARDED_BY(mu_)
};

}  // namespace kvfs::fs
