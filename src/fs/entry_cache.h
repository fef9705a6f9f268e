// EntryCache: what names in directories resolve to, in RAM, in front of the
// index's entries (RocksDB). A walk that finds its name here costs a hash
// probe instead of a RocksDB Get (~2 us, most of a batch EXISTS). It holds
// positive entries (name -> inode) and negative ones (name known missing),
// bounded in bytes, least recently used out first, per shard.
//
// A directory marked complete has every name it holds here (one made by
// this mount: the index has nothing in it that did not pass through the
// cache): a name of it the cache does not know is missing, with no index
// read, which is what a storm of existence checks of new keys asks. It
// stops being complete the moment one of its names cannot be kept (evicted,
// erased, too large).
//
//   if (auto hit = cache.Get(parent, name)) return *hit ? *hit : ENOENT;
//   r = index.LookupEntry(parent, name); cache.Put(parent, name, r ? *r : 0);
//
// Coherence is the caller's: FileSystem puts every namespace change here
// under its exclusive namespace lock, and what the index answered under the
// shared one, so no change comes between an index read and its Put.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "common/mutex.h"

namespace kvfs::fs {

class EntryCache {
 public:
  explicit EntryCache(size_t max_bytes);
  EntryCache(const EntryCache&) = delete;
  EntryCache& operator=(const EntryCache&) = delete;

  // The inode `name` in directory `parent` names, 0 if it is known to be
  // missing; nullopt if the cache does not know.
  std::optional<uint64_t> Get(uint64_t parent, std::string_view name);
  // Records that `name` in `parent` names `child` (0: missing).
  void Put(uint64_t parent, std::string_view name, uint64_t child);
  // Forgets `name` in `parent`.
  void Erase(uint64_t parent, std::string_view name);

  // `dir` holds no name the cache has not been given (Put) since: a new
  // directory. Up to kMaxComplete directories at once.
  void MarkComplete(uint64_t dir);
  // Whether every name of `dir` is here (MarkComplete, none lost since).
  bool Complete(uint64_t dir);
  // No directory is complete any more.
  void ForgetComplete();

  size_t entries() const;
  size_t bytes() const;

 private:
  static constexpr size_t kShards = 16;
  // Bytes charged per entry besides its key: list node, hash node and
  // bucket, the key's heap block.
  static constexpr size_t kEntryOverhead = 144;
  static constexpr size_t kMaxComplete = 1 << 20;

  struct Node {
    std::string key;  // parent (8 bytes, native order) + name
    uint64_t child;
  };
  struct Shard {
    mutable Mutex mu;
    std::list<Node> lru GUARDED_BY(mu);  // most recent first
    // Keys view Node::key, which list nodes keep in place.
    std::unordered_map<std::string_view, std::list<Node>::iterator> map GUARDED_BY(mu);
    size_t bytes GUARDED_BY(mu) = 0;
  };

  // Builds the key in a thread-local buffer; the view lives until the next
  // call on this thread.
  static std::string_view Key(uint64_t parent, std::string_view name);
  Shard& ShardOf(std::string_view key);
  // Drops the entry; its directory is no longer complete if it named an
  // inode. Called with the entry's shard locked, so a Get of that name
  // that misses after it sees the directory incomplete.
  void EraseLocked(Shard& s, std::list<Node>::iterator it) REQUIRES(s.mu);
  void NotComplete(uint64_t dir);
  static uint64_t ParentOf(const std::string& key);

  const size_t max_bytes_per_shard_;
  Shard shards_[kShards];
  // Taken inside a shard's lock, never the other way round.
  Mutex complete_mu_;
  std::unordered_set<uint64_t> complete_ GUARDED_BY(complete_mu_);
  // complete_.size(): a lookup in a directory of an old mount (none
  // complete) takes no lock for it.
  std::atomic<size_t> complete_count_{0};
};

}  // namespace kvfs::fs
