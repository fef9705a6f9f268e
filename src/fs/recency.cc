#include "fs/recency.h"

namespace kvfs::fs {

void Recency::Place(uint64_t ino, Node& n) {
  order_.erase({n.placed_ns, ino});
  n.placed_ns = n.stamp->ns.load(std::memory_order_relaxed);
  order_.insert({n.placed_ns, ino});
}

void Recency::Named(uint64_t ino, uint64_t parent, std::string_view name, int64_t now_ns) {
  MutexLock l(mu_);
  auto [it, fresh] = nodes_.try_emplace(ino);
  Node& n = it->second;
  if (fresh) {
    n.stamp = std::make_shared<UseStamp>();
    n.placed_ns = now_ns;
    order_.insert({now_ns, ino});
  }
  n.parent = parent;
  n.name.assign(name);
  n.stamp->Use(now_ns);
  Place(ino, n);
}

std::shared_ptr<UseStamp> Recency::StampOf(uint64_t ino) {
  MutexLock l(mu_);
  auto it = nodes_.find(ino);
  return it != nodes_.end() ? it->second.stamp : std::make_shared<UseStamp>();
}

void Recency::Touch(uint64_t ino, int64_t now_ns) {
  MutexLock l(mu_);
  auto it = nodes_.find(ino);
  if (it != nodes_.end()) it->second.stamp->Use(now_ns);
}

void Recency::Moved(uint64_t ino, uint64_t parent, std::string_view name) {
  MutexLock l(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  it->second.parent = parent;
  it->second.name.assign(name);
}

void Recency::Unnamed(uint64_t ino) {
  MutexLock l(mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  order_.erase({it->second.placed_ns, ino});
  nodes_.erase(it);
}

std::vector<VictimOrder::Candidate> Recency::Next(size_t n,
                                                  const std::unordered_set<uint64_t>& pass_over) {
  MutexLock l(mu_);
  std::vector<Candidate> out;
  for (auto it = order_.begin(); it != order_.end() && out.size() < n;) {
    const auto [placed, ino] = *it;
    Node& node = nodes_.find(ino)->second;
    const int64_t used = node.stamp->ns.load(std::memory_order_relaxed);
    if (used > placed) {
      // Used since it was placed: re-placed later in the order (reached
      // again further on if it is still among the oldest).
      it = order_.erase(it);
      node.placed_ns = used;
      const auto placed_again = order_.insert({used, ino}).first;
      // Still before the next one (used between the two): look at it next.
      if (it == order_.end() || *placed_again < *it) it = placed_again;
      continue;
    }
    if (!pass_over.contains(ino)) {
      out.push_back(Candidate{ino, node.parent, node.name, placed, node.stamp});
    }
    ++it;
  }
  return out;
}

size_t Recency::size() const {
  MutexLock l(mu_);
  return nodes_.size();
}

}  // namespace kvfs::fs
