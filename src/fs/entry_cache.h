// EntryCache: what names in directories resolve to, in RAM, in front of the
// index's entries (RocksDB). A walk that finds its name here costs a hash
// probe instead of a RocksDB Get (~2 us, most of a batch EXISTS). It holds
// positive entries (name -> inode) and negative ones (name known missing),
// bounded in bytes, least recently used out first, per shard.
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
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

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

  size_t entries() const;
  size_t bytes() const;

 private:
  static constexpr size_t kShards = 16;
  // Bytes charged per entry besides its key: list node, hash node and
  // bucket, the key's heap block.
  static constexpr size_t kEntryOverhead = 144;

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
  static void EraseLocked(Shard& s, std::list<Node>::iterator it) REQUIRES(s.mu);

  const size_t max_bytes_per_shard_;
  Shard shards_[kShards];
};

}  // namespace kvfs::fs
