#include "fs/namespace.h"

#include <algorithm>

namespace kvfs::fs {

Namespace::Namespace(const index::Index& index, size_t entry_cache_bytes)
    : index_(index), cache_(entry_cache_bytes) {}

Result<uint64_t> Namespace::Resolve(uint64_t parent, std::string_view name) {
  auto it = pending_.find(std::pair<uint64_t, std::string_view>(parent, name));
  if (it != pending_.end()) {
    if (it->second.child == 0) return Status::Error(ENOENT, std::string(name));
    return it->second.child;
  }
  if (std::optional<uint64_t> hit = cache_.Get(parent, name)) {
    // No formatted message: a stat storm's common answer (as the index's).
    if (*hit == 0) return Status::Error(ENOENT, "no such entry");
    return *hit;
  }
  // Not cached as a negative entry: a storm of new names would push out
  // the names that keep the directory complete.
  if (cache_.Complete(parent)) return Status::Error(ENOENT, "no such entry");
  // mu_ is held (shared at least): no change comes between this read and
  // the Put.
  Result<uint64_t> r = index_.LookupEntry(parent, name);
  if (r.ok()) {
    cache_.Put(parent, name, *r);
  } else if (r.status().code() == ENOENT) {
    cache_.Put(parent, name, 0);
  }
  return r;
}

Status Namespace::List(uint64_t dir, std::vector<Entry>* out) {
  // Names changed but not yet committed override the index's listing.
  std::map<std::string_view, uint64_t> overlay;
  auto lo = pending_.lower_bound(std::make_pair(dir, std::string()));
  for (auto it = lo; it != pending_.end() && it->first.first == dir; ++it) {
    overlay.emplace(it->first.second, it->second.child);
  }
  const size_t start = out->size();
  KVFS_RETURN_IF_ERROR(index_.ListEntries(dir, "", [&](std::string_view name, uint64_t child) {
    if (overlay.find(name) == overlay.end()) out->push_back({std::string(name), child});
    return true;
  }));
  for (const auto& [name, child] : overlay) {
    if (child) out->push_back({std::string(name), child});
  }
  std::sort(out->begin() + static_cast<std::ptrdiff_t>(start), out->end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return Status::OK();
}

void Namespace::Record(const Change& c) {
  for (const EntryOp& op : c.entry_ops) {
    Pending& e = pending_[{op.parent, op.name}];
    e.child = op.child;
    e.changes++;
    cache_.Put(op.parent, op.name, op.child);
  }
}

void Namespace::Committed(const Change& c, bool ok) {
  if (c.entry_ops.empty()) return;
  NamespaceWriteLock l(mu_);
  for (const EntryOp& op : c.entry_ops) {
    auto it = pending_.find(std::make_pair(op.parent, op.name));
    if (it != pending_.end() && --it->second.changes == 0) pending_.erase(it);
    if (!ok) cache_.Erase(op.parent, op.name);
  }
  // A directory whose making failed is not empty in the index for sure
  // (its number may come back): none is trusted any more.
  if (!ok) cache_.ForgetComplete();
}

}  // namespace kvfs::fs
