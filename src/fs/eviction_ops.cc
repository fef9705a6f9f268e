// FileSystem::Impl's side of eviction (policy: fs/eviction.h; order:
// fs/recency.h): the order rebuilt at mount, the evictable checks, the
// unlinks, and the listener that tells the front end a name went.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "fs/file_system_impl.h"

namespace kvfs::fs {

namespace {
constexpr std::string_view kScopeValue = "lru";
// Directories walked up from a file at most looking for the scope mark.
constexpr int kMaxScopeDepth = 4096;
}  // namespace

void FileSystem::Impl::StartEviction() {
  if (!options_.eviction.enabled) return;
  recency_ = std::make_unique<Recency>();
  // One scan of the inodes (the atimes of single-link regular files) and
  // one of the entries (their names): O(files) index reads and ~100 bytes
  // of memory per file plus its name.
  const auto start = std::chrono::steady_clock::now();
  std::unordered_map<uint64_t, int64_t> atimes;
  Status st = volume_.index().ForEachInode([&](const index::Inode& r) {
    // A store is a use too (Insert at create): a file never read since its
    // last write was last used then.
    if ((r.mode & S_IFMT) == S_IFREG && r.nlink == 1) {
      atimes.emplace(r.ino, std::max(r.atime_ns, r.mtime_ns));
    }
    return true;
  });
  std::vector<Recency::Entry> files;
  if (st.ok()) {
    st = volume_.index().ForEachEntry([&](uint64_t parent, std::string_view name, uint64_t child) {
      auto it = atimes.find(child);
      if (it != atimes.end()) files.push_back({child, parent, std::string(name), it->second, nullptr});
      return true;
    });
  }
  if (!st.ok()) spdlog::warn("eviction: rebuilding the recency order: {}", st.ToString());
  for (const Recency::Entry& e : files) recency_->Insert(e.ino, e.parent, e.name, e.last_use_ns);
  spdlog::info("eviction: recency order of {} files rebuilt from atimes in {} ms", files.size(),
               std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - start)
                   .count());
  Evictor::Hooks hooks;
  hooks.space = [this] {
    volume::SpaceStats s = volume_.space();
    return Evictor::Space{s.total_bytes - s.free_bytes, s.total_bytes};
  };
  hooks.evict = [this](size_t max_files, uint64_t bytes, std::vector<Evictor::Gone>* gone) {
    return EvictBatch(max_files, bytes, gone);
  };
  hooks.commit = [this] { committer_->Drain(false).ignore(); };  // errors surface on the next call
  hooks.evicted = [this](const Evictor::Gone& g) {
    std::lock_guard<std::mutex> l(listener_mu_);
    if (evict_listener_) evict_listener_(g.parent, g.name, g.ino);
  };
  evictor_ = std::make_unique<Evictor>(options_.eviction, std::move(hooks));
}

bool FileSystem::Impl::InEvictScope(uint64_t dir) {
  if (options_.eviction.scope == EvictScope::kMount) return true;
  for (int depth = 0; depth < kMaxScopeDepth && dir != 0; ++depth) {
    Result<InodeRef> d = table_.Get(dir);
    if (!d.ok()) return false;
    std::lock_guard<std::mutex> l((*d)->mu);
    for (const index::Xattr& x : (*d)->rec.xattrs) {
      if (x.name == index::kEvictXattr) return x.value == kScopeValue;  // the nearest mark decides
    }
    if (dir == kRootIno) return false;
    dir = (*d)->rec.parent ? (*d)->rec.parent : kRootIno;
  }
  return false;
}

// Why `v` may not be evicted now, or null. REQUIRES: v.mu held.
static const char* Protected(const InodeState& v, const InodeTable& table) {
  if (!v.is_reg()) return "not a regular file";
  if (v.deleted || v.orphan) return "no name";
  if (v.rec.nlink != 1) return "more than one link";
  if (table.opens(v) > 0) return "open";
  if (v.inflight_writes > 0 || v.data_change_queued || !v.gated.empty()) return "uncommitted data";
  for (const auto& [ci, cs] : v.chunks) {
    if (cs.staged || cs.inflight) return "staged data";
  }
  return nullptr;
}

Evictor::Batch FileSystem::Impl::EvictBatch(size_t max_files, uint64_t bytes,
                                            std::vector<Evictor::Gone>* gone) {
  Evictor::Batch b;
  // After an index or device failure nothing commits: an unlink would only
  // hide a file it cannot free.
  if (!Writable().ok()) return b;
  const int64_t now = NowNs();
  const int64_t min_age = options_.eviction.min_age_ns;
  std::unordered_set<uint64_t> kept;  // looked at and protected: passed over
  NamespaceWriteLock ns(ns_.mu());
  for (;;) {
    std::vector<Recency::Entry> cands = recency_->Oldest(max_files, kept);
    if (cands.empty()) return b;
    for (const Recency::Entry& c : cands) {
      if (b.files >= max_files || b.bytes >= bytes) return b;
      // Least recently used first: every file after this one was used later.
      if (now - c.last_use_ns < min_age) return b;
      Result<uint64_t> named = ns_.Resolve(c.parent, c.name);
      if (!named.ok() || *named != c.ino) {  // a name change it was not told of
        spdlog::warn("eviction: inode {} is not {} in {}; no longer tracked", c.ino, c.name,
                     c.parent);
        recency_->Remove(c.ino);
        continue;
      }
      Result<InodeRef> v = table_.Get(c.ino);
      if (!v.ok()) {
        kept.insert(c.ino);
        continue;
      }
      uint64_t size = 0;
      bool keep;
      {
        std::lock_guard<std::mutex> l((*v)->mu);
        // Used since Oldest() looked (getattr and read take no ns_.mu()): not
        // the oldest any more.
        keep = Protected(**v, table_) != nullptr ||
               c.stamp->ns.load(std::memory_order_relaxed) != c.last_use_ns;
        size = (*v)->rec.size;
      }
      if (!keep) keep = !InEvictScope(c.parent);
      if (keep) {
        kept.insert(c.ino);
        continue;
      }
      Status st = UnlinkLocked(c.parent, c.name);
      if (!st.ok()) {
        spdlog::warn("eviction: unlink of inode {}: {}", c.ino, st.ToString());
        kept.insert(c.ino);
        continue;
      }
      ++b.files;
      b.bytes += AlignUp(size, kBlockSize);
      b.last_age_ns = now - c.last_use_ns;
      gone->push_back(Evictor::Gone{c.parent, c.name, c.ino});
    }
  }
}

void FileSystem::Impl::SetEvictionListener(
    std::function<void(uint64_t, std::string_view, uint64_t)> fn) {
  std::lock_guard<std::mutex> l(listener_mu_);
  evict_listener_ = std::move(fn);
}

}  // namespace kvfs::fs
