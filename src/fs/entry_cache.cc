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

uint64_t EntryCache::ParentOf(const std::string& key) {
  uint64_t parent;
  std::memcpy(&parent, key.data(), sizeof(parent));
  return parent;
}

void EntryCache::EraseLocked(Shard& s, std::list<Node>::iterator it) {
  if (it->child != 0) NotComplete(ParentOf(it->key));
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
  if (charge > max_bytes_per_shard_) {
    if (child != 0) NotComplete(parent);
    return;
  }
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

void EntryCache::MarkComplete(uint64_t dir) {
  MutexLock l(complete_mu_);
  if (complete_.size() >= kMaxComplete) return;
  complete_.insert(dir);
  complete_count_.store(complete_.size(), std::memory_order_release);
}

bool EntryCache::Complete(uint64_t dir) {
  if (complete_count_.load(std::memory_order_acquire) == 0) return false;
  MutexLock l(complete_mu_);
  return complete_.count(dir) != 0;
}

void EntryCache::NotComplete(uint64_t dir) {
  if (complete_count_.load(std::memory_order_acquire) == 0) return;
  MutexLock l(complete_mu_);
  complete_.erase(dir);
  complete_count_.store(complete_.size(), std::memory_order_release);
}

void EntryCache::ForgetComplete() {
  MutexLock l(complete_mu_);
  complete_.clear();
  complete_count_.store(0, std::memory_order_release);
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
