// Recency: the exact least-recently-used order of the regular files with a
// name; the eviction policy's victim order (fs/victim_order.h).
//
// Every tracked file has a node: its inode, the name eviction unlinks it by
// (the one it was created or renamed to) and a UseStamp, the time of its
// last use, which the file's in-memory inode shares (InodeState::use_stamp).
// A use (lookup, getattr, open, read, the batch's READ/STAT) is one relaxed
// atomic store into that stamp: no lock, O(1). The order is kept lazily and
// exactly: nodes sit in a set keyed by the stamp they had when last placed,
// which is never later than their real last use. Next() walks it from the
// old end; a node whose stamp moved is re-placed under its real stamp
// (O(log n), once per use epoch) and the walk goes on. A node reached whose
// stamp did not move is older than everything after it, so the files it
// returns are exactly the least recently used.
//
// The mutex guards the set and the map. It is taken by name changes
// (already under the namespace lock), by the first use of a file loaded
// into memory (StampOf), by the batch's EXISTS (Touch, which has no inode
// at hand) and by the eviction pass; never by a read.
//
// Persisted coarsely: the order is rebuilt at mount from the atimes of the
// index's records (FileSystem::Impl::StartEviction), so it survives a
// remount at the atime's granularity (fs/atime.h).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "fs/victim_order.h"

namespace kvfs::fs {

class Recency final : public VictimOrder {
 public:
  // NameObserver. Named: tracked from now, used at `now_ns` (if tracked
  // already: the new name, and a use at `now_ns`).
  void Named(uint64_t ino, uint64_t parent, std::string_view name, int64_t now_ns) override;
  void Moved(uint64_t ino, uint64_t parent, std::string_view name) override;
  void Unnamed(uint64_t ino) override;
  // VictimOrder: Next() is least recently used first.
  std::shared_ptr<UseStamp> StampOf(uint64_t ino) override;
  void Touch(uint64_t ino, int64_t now_ns) override;
  std::vector<Candidate> Next(size_t n, const std::unordered_set<uint64_t>& pass_over) override;
  bool oldest_use_first() const override { return true; }
  size_t size() const override;

 private:
  struct Node {
    uint64_t parent = 0;
    std::string name;
    int64_t placed_ns = 0;  // its key in order_
    std::shared_ptr<UseStamp> stamp;
  };
  // Puts `ino` in order_ under its stamp's time.
  void Place(uint64_t ino, Node& n) REQUIRES(mu_);

  mutable Mutex mu_;
  std::unordered_map<uint64_t, Node> nodes_ GUARDED_BY(mu_);
  std::set<std::pair<int64_t, uint64_t>> order_ GUARDED_BY(mu_);  // (placed_ns, ino)
};

}  // namespace kvfs::fs
