#include "fs/eviction_rules.h"

#include <string_view>

#include "common/format.h"
#include "index/records.h"

namespace kvfs::fs {

namespace {
constexpr std::string_view kScopeValue = "lru";
// Directories walked up from a file at most looking for the scope mark.
constexpr int kMaxScopeDepth = 4096;
}  // namespace

bool EvictionRules::Protected(const InodeState& v, const InodeTable& table) {
  if (!v.is_reg() || v.deleted || v.orphan) return true;
  if (table.opens(v) > 0) return true;
  // Staged, being written, or written and not yet named by the index.
  return !v.data.Quiescent();
}

bool EvictionRules::InScope(uint64_t dir) const {
  if (options_.scope == EvictScope::kMount) return true;
  for (int depth = 0; depth < kMaxScopeDepth && dir != 0; ++depth) {
    Result<InodeRef> d = table_.Get(dir);
    if (!d.ok()) return false;
    MutexLock l((*d)->mu());
    for (const index::Xattr& x : (*d)->rec.xattrs) {
      if (x.name == index::kEvictXattr) return x.value == kScopeValue;  // the nearest mark decides
    }
    if (dir == kRootIno) return false;
    dir = (*d)->rec.parent ? (*d)->rec.parent : kRootIno;
  }
  return false;
}

EvictionRules::Verdict EvictionRules::Judge(const VictimOrder::Candidate& c, int64_t now_ns,
                                            bool oldest_use_first, uint64_t* bytes) const {
  if (now_ns - c.last_use_ns < options_.min_age_ns) {
    return oldest_use_first ? Verdict::kStop : Verdict::kKeep;
  }
  Result<InodeRef> v = table_.Get(c.ino);
  if (!v.ok()) return Verdict::kKeep;
  {
    MutexLock l((*v)->mu());
    if (Protected(**v, table_)) return Verdict::kKeep;
    // Used since the order offered it (getattr and read take no ns_mu_):
    // not where the order put it any more.
    if (c.stamp->ns.load(std::memory_order_relaxed) != c.last_use_ns) return Verdict::kKeep;
    *bytes = AlignUp((*v)->rec.size, kBlockSize);
  }
  return InScope(c.parent) ? Verdict::kEvict : Verdict::kKeep;
}

}  // namespace kvfs::fs
