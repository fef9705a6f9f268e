// FileSystem::Impl's side of eviction (policy: fs/eviction.h; order:
// fs/victim_order.h; what may go: fs/eviction_rules.h): the order rebuilt
// at mount, the unlinks, and the listener that tells the front end a name
// went.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "common/kill_point.h"
#include "fs/eviction_rules.h"
#include "fs/file_system_impl.h"
#include "fs/recency.h"

namespace kvfs::fs {

void FileSystem::Impl::StartEviction() {
  if (!options_.eviction.enabled) return;
  auto victims = std::make_unique<Recency>();
  // One scan of the inodes (the atimes of regular files) and
  // one of the entries (their names): O(files) index reads and ~100 bytes
  // of memory per file plus its name.
  const auto start = std::chrono::steady_clock::now();
  std::unordered_map<uint64_t, int64_t> atimes;
  Status st = volume_.index().ForEachInode([&](const index::Inode& r) {
    // A store is a use too (Insert at create): a file never read since its
    // last write was last used then.
    if ((r.mode & S_IFMT) == S_IFREG) {
      atimes.emplace(r.ino, std::max(r.atime_ns, r.mtime_ns));
    }
    return true;
  });
  struct Named {
    uint64_t ino, parent;
    std::string name;
    int64_t last_use_ns;
  };
  std::vector<Named> files;
  if (st.ok()) {
    st = volume_.index().ForEachEntry([&](uint64_t parent, std::string_view name, uint64_t child) {
      auto it = atimes.find(child);
      if (it != atimes.end()) files.push_back({child, parent, std::string(name), it->second});
      return true;
    });
  }
  if (!st.ok()) spdlog::warn("eviction: rebuilding the recency order: {}", st.ToString());
  for (const Named& e : files) victims->Named(e.ino, e.parent, e.name, e.last_use_ns);
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
  hooks.commit = [this] {
    KVFS_KILL_POINT("Eviction::BeforeCommit");  // a batch of victims unlinked, not committed
    committer_->Drain(false).ignore();  // errors surface on the next call
  };  // errors surface on the next call
  eviction_.Start(std::move(victims), options_.eviction, std::move(hooks));
}

Evictor::Batch FileSystem::Impl::EvictBatch(size_t max_files, uint64_t bytes,
                                            std::vector<Evictor::Gone>* gone) {
  Evictor::Batch b;
  // After an index or device failure nothing commits: an unlink would only
  // hide a file it cannot free.
  if (!Writable().ok()) return b;
  const int64_t now = NowNs();
  const EvictionRules rules(options_.eviction, table_);
  std::unordered_set<uint64_t> kept;  // looked at and kept: passed over
  VictimOrder& victims = *eviction_.order();
  NamespaceWriteLock ns(ns_.mu());
  for (;;) {
    std::vector<VictimOrder::Candidate> cands = victims.Next(max_files, kept);
    if (cands.empty()) return b;
    for (const VictimOrder::Candidate& c : cands) {
      if (b.files >= max_files || b.bytes >= bytes) return b;
      Result<uint64_t> named = ns_.Resolve(c.parent, c.name);
      if (!named.ok() || *named != c.ino) {  // a name change it was not told of
        spdlog::warn("eviction: inode {} is not {} in {}; no longer tracked", c.ino, c.name,
                     c.parent);
        victims.Unnamed(c.ino);
        continue;
      }
      uint64_t size = 0;
      switch (rules.Judge(c, now, victims.oldest_use_first(), &size)) {
        case EvictionRules::Verdict::kStop:
          return b;
        case EvictionRules::Verdict::kKeep:
          kept.insert(c.ino);
          continue;
        case EvictionRules::Verdict::kEvict:
          break;
      }
      Status st = UnlinkLocked(c.parent, c.name, /*check=*/nullptr);
      if (!st.ok()) {
        spdlog::warn("eviction: unlink of inode {}: {}", c.ino, st.ToString());
        kept.insert(c.ino);
        continue;
      }
      KVFS_KILL_POINT("Eviction::AfterUnlink");
      ++b.files;
      b.bytes += size;
      b.last_age_ns = now - c.last_use_ns;
      gone->push_back(Evictor::Gone{c.parent, c.name, c.ino});
    }
  }
}

void FileSystem::Impl::SetEvictionListener(
    std::function<void(uint64_t, std::string_view, uint64_t)> fn) {
  eviction_.SetListener(std::move(fn));
}

}  // namespace kvfs::fs
