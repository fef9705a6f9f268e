// EvictionRules: what eviction may unlink now, in one place. The victim
// order (fs/victim_order.h) offers files; these rules say, for each, evict,
// keep (pass over it) or stop the pass.
//
// Never evicted (kKeep):
//   - anything but a regular file with a name (a directory, a control
//     file; an unlinked open file has no name to evict);
//   - a file open by anyone;
//   - a file with staged, in-flight or uncommitted data (its data would
//     be freed under the write, and its name is the only way back to it):
//     its FileData says so (Quiescent);
//   - a file used since the order offered it (no longer the oldest);
//   - with scope=xattr, a file with no ancestor directory whose nearest
//     user.kvfs.evict mark says "lru".
// A file used within min_age is kept too; with an order by last use,
// oldest first, it ends the pass (kStop): every file after it was used
// later. Hard links are refused (only an O_TMPFILE's one link is made), so
// a named regular file has exactly one name.
//
// Thread safety: Judge may be called from any thread holding ns_mu_ (the
// scope walk reads directories' parents, which renames change under it).
#pragma once

#include <cstdint>

#include "fs/eviction.h"
#include "fs/inode_table.h"
#include "fs/victim_order.h"

namespace kvfs::fs {

class EvictionRules {
 public:
  enum class Verdict { kEvict, kKeep, kStop };
  // `table` must outlive the rules.
  EvictionRules(const EvictionOptions& options, InodeTable& table)
      : options_(options), table_(table) {}

  // The verdict on `c` (offered by an order for which `oldest_use_first`
  // says whether it is by last use, oldest first) at `now_ns`; with
  // kEvict, *bytes is the space its data takes (its size, in blocks).
  // REQUIRES: ns_mu_ held; no inode's mu held.
  Verdict Judge(const VictimOrder::Candidate& c, int64_t now_ns, bool oldest_use_first,
                uint64_t* bytes) const;

  // Whether `v` must stay whatever its age and place: not a regular file
  // with a name, open, or data not yet committed (FileData::Quiescent).
  static bool Protected(const InodeState& v, const InodeTable& table) REQUIRES(v.mu());
  // scope=xattr: whether directory `dir` or its nearest ancestor with
  // user.kvfs.evict says "lru" (always true with scope=mount).
  // REQUIRES: ns_mu_ held; no inode's mu held.
  bool InScope(uint64_t dir) const;

 private:
  const EvictionOptions& options_;
  InodeTable& table_;
};

}  // namespace kvfs::fs
