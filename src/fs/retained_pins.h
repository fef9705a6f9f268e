// RetainedPins: pins that keep the newest `max` inodes given to it in the
// inode table. An inode loaded into the RAM cache without a kernel lookup
// (a batch PREFETCH, a readahead guess) would otherwise leave the table
// when its loads finish, and its cache entries, keyed by the InodeState,
// with it, before the load loop opens it.
//
// Thread safety: any thread. Its mutex is taken last and never held while
// a pin is released (a release may unload the inode).
#pragma once

#include <cstddef>
#include <deque>

#include "common/mutex.h"
#include "fs/inode_table.h"

namespace kvfs::fs {

class RetainedPins {
 public:
  explicit RetainedPins(size_t max) : max_(max) {}

  // Keeps `pin` as the newest; releases the oldest past `max`.
  void Retain(InodePin pin) EXCLUDES(mu_);
  // Releases every pin.
  void Clear() EXCLUDES(mu_);
  size_t size() const EXCLUDES(mu_);

 private:
  const size_t max_;
  mutable Mutex mu_;
  std::deque<InodePin> pins_ GUARDED_BY(mu_);  // oldest first
};

}  // namespace kvfs::fs
