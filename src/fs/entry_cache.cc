#include "fs/entry_cache.h"

#include <cstring>
#include <functional>

namespace kvfs::fs {

EntryCache::EntryCache(size_t max_bytes) : max_bytes_per_shard_(max_bytes / kShards) {}

std::string_view EntryCache::Key(uint64_t parent, std::string_view name) {
  thread_local std::string buf;
  buf.resize(sizeof(parent) + name.size());
  std::memcpy(buf.data(), &parent, sizeof(parent));
  std::memcpy(buf.data() + sizeof(parent), name.data(), name.size());
  return buf;
}

EntryCache::Shard& EntryCache::ShardOf(std::string_view key) {
  return shards_[std::hash<std::string_view>()(key) % kShards];
}

void EntryCache::EraseLocked(Shard& s, std::list<Node>::iterator it) {
  s.bytes -= it->key.size() + kEntryOverhead;
  s.map.erase(std::string_view(it->key));
  s.lru.erase(it);
}

std::optional<uint64_t> EntryCache::Get(uint64_t parent, std::string_view name) {
  std::string_view key = Key(parent, name);
  Shard& s = ShardOf(key);
  MutexLock l(s.mu);
  auto it = s.map.find(key);
  if (it == s.map.end()) return std::nullopt;
  s.lru.splice(s.lru.begin(), s.lru, it->second);
  return it->second->child;
}

void EntryCache::Put(uint64_t parent, std::string_view name, uint64_t child) {
  std::string_view key = Key(parent, name);
  const size_t charge = key.size() + kEntryOverhead;
  Shard& s = ShardOf(key);
  MutexLock l(s.mu);
  auto it = s.map.find(key);
  if (it != s.map.end()) {
    it->second->child = child;
    s.lru.splice(s.lru.begin(), s.lru, it->second);
    return;
  }
  if (charge > max_bytes_per_shard_) return;
  while (s.bytes + charge > max_bytes_per_shard_) EraseLocked(s, std::prev(s.lru.end()));
  s.lru.push_front(Node{std::string(key), child});
  s.map.emplace(std::string_view(s.lru.front().key), s.lru.begin());
  s.bytes += charge;
}

void EntryCache::Erase(uint64_t parent, std::string_view name) {
  std::string_view key = Key(parent, name);
  Shard& s = ShardOf(key);
  MutexLock l(s.mu);
  auto it = s.map.find(key);
  if (it != s.map.end()) EraseLocked(s, it->second);
}

size_t EntryCache::entries() const {
  size_t n = 0;
  for (const Shard& s : shards_) {
    MutexLock l(s.mu);
    n += s.map.size();
  }
  return n;
}

size_t EntryCache::bytes() const {
  size_t n = 0;
  for (const Shard& s : shards_) {
    MutexLock l(s.mu);
    n += s.bytes;
  }
  return n;
}

}  // namespace kvfs::fs
