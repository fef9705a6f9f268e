// RetainedPins: pins that keep the newest `max` inodes given to it in the
// inode table. An inode loaded into the RAM cache without a kernel lookup
// (a batch PREFETCH, a readahead guess) would otherwise leave the table
// when its loads finish, and its cache entries, keyed by the InodeState,
// with it, before the load loop opens it.
//
// RetainedLoads: FileSystem::Impl's part that owns both lists: what a batch
// PREFETCH asked for, and readahead guesses in a smaller list of their own,
// so that a long load loop does not push out what a client asked for.
//
// Thread safety: any thread. Its mutex is taken last and never held while
// a pin is released (a release may unload the inode). RetainedLoads adds
// no lock of its own: each list's is taken alone.
#pragma once

#include <cstddef>
#include <deque>
#include <utility>

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

class RetainedLoads {
 public:
  RetainedLoads(size_t max_prefetches, size_t max_guesses)
      : prefetches_(max_prefetches), guesses_(max_guesses) {}

  // An inode a batch PREFETCH loaded.
  void RetainPrefetch(InodePin pin) { prefetches_.Retain(std::move(pin)); }
  // A readahead guess loaded.
  void RetainGuess(InodePin pin) { guesses_.Retain(std::move(pin)); }
  // Releases every pin of both lists.
  void Clear() {
    prefetches_.Clear();
    guesses_.Clear();
  }

 private:
  RetainedPins prefetches_;
  RetainedPins guesses_;
};

}  // namespace kvfs::fs
