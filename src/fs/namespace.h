// Namespace: what the names of the filesystem resolve to, the calls'
// changes included before the index has them, and the lock that orders
// every name change.
//
// A name change (fs/name_change.h) is built and queued under mu() held
// exclusively; Record() makes its entries pending, and they override the
// index's (Resolve, List) until the committer has committed the change
// (Committed). What the index answers is cached (fs/entry_cache.h) under
// the lock held shared, so no change comes between an index read and its
// cache entry.
//
//   NamespaceWriteLock ns(namespace.mu());
//   NameChange change(table, observer, now);  // ... build it
//   namespace.Record(*change.change());       // then queue it to the committer
//
// Lock order: mu() first, before any InodeState's mu and the inode
// table's, the handles', the committer's and the eviction order's locks.
//
// Thread safety: Resolve and List with mu() held at least shared, Record
// with it held exclusively; Committed and the counts from any thread, mu()
// not held.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "fs/committer.h"
#include "fs/entry_cache.h"
#include "fs/namespace_lock.h"
#include "index/index.h"

namespace kvfs::fs {

class Namespace {
 public:
  // `index` must outlive it.
  Namespace(const index::Index& index, size_t entry_cache_bytes);

  NamespaceLock& mu() RETURN_CAPABILITY(mu_) { return mu_; }

  // The inode `name` in `parent` names: pending changes first, then the
  // cache, then the index. ENOENT if there is none, else the index's errors.
  Result<uint64_t> Resolve(uint64_t parent, std::string_view name) REQUIRES_SHARED(mu_);
  struct Entry {
    std::string name;
    uint64_t child = 0;
  };
  // `dir` was just made (its change recorded): none of its names is in the
  // index, so until the cache loses one, a name it does not know in `dir`
  // is missing without an index read.
  void NewDirectory(uint64_t dir) REQUIRES(mu_) { cache_.MarkComplete(dir); }
  // The names in directory `dir` in name order, pending changes applied.
  // Fails with the index's error (*out is then incomplete).
  Status List(uint64_t dir, std::vector<Entry>* out) REQUIRES_SHARED(mu_);

  // `c`, about to be queued, sets its entries: pending until Committed(c).
  void Record(const Change& c) REQUIRES(mu_);
  // The committer committed `c` (`ok`) or failed it: its entries are no
  // longer pending; a failed change's are forgotten by the cache too, so
  // names resolve as the index has them, as after a remount.
  void Committed(const Change& c, bool ok) EXCLUDES(mu_);

  size_t cached_entries() const { return cache_.entries(); }
  size_t cached_bytes() const { return cache_.bytes(); }

 private:
  // An entry set by queued changes that are not committed yet.
  struct Pending {
    uint64_t child = 0;  // 0: deleted
    int changes = 0;     // queued changes that set it
  };
  // (parent, name) keys, comparable with a (parent, string_view) so that a
  // lookup builds no string (lookups far outnumber pending changes).
  struct KeyLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      if (a.first != b.first) return a.first < b.first;
      return std::string_view(a.second) < std::string_view(b.second);
    }
  };

  const index::Index& index_;
  // Serializes name changes. Lookups take it shared, so index reads of a
  // batch's STAT entries (and of FUSE lookups) run in parallel; a waiting
  // change goes before new lookups.
  NamespaceLock mu_;
  std::map<std::pair<uint64_t, std::string>, Pending, KeyLess> pending_ GUARDED_BY(mu_);
  // Its own locks; coherent with the index because it is written under mu_.
  EntryCache cache_;
};

}  // namespace kvfs::fs
