// Model: the whole index in memory, compact enough for millions of files,
// plus the repairs fsck plans on it.
//
// Load() reads every inode, entry and orphan record once (full scans in key
// order). Inodes are then sorted by number, entries by (parent, name) and
// each inode's extents lie contiguously in `extents`. The checks
// (namespace_check.h, extent_check.h) record findings and plan repairs by
// changing the model: entries flagged deleted or appended as added, inodes
// flagged for reclaim or re-linking, new extent lists. Final() derives the
// state a repair leaves (link counts, entry counts, parents) from that, and
// repair.h writes the difference to the index.
//
// Memory: about 120 bytes per inode with one extent and one name, plus the
// names themselves.
//
// Thread safety: none; one thread builds and uses a Model.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/extent.h"
#include "common/status.h"
#include "fsck/finding.h"
#include "fsck/progress.h"
#include "index/index.h"
#include "index/records.h"

namespace kvfs::fsck {

// fs/ keeps every extent inside one chunk of this many bytes of the file
// (fs/inode_state.h kChunkBytes; fsck does not depend on fs/, the fsck tests
// pin the two together) and refuses to load an inode that breaks the rule.
inline constexpr uint64_t kFsChunkBytes = 1 << 20;

inline constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

namespace inode_flags {
inline constexpr uint16_t kOrphanKey = 1 << 0;   // an orphan record exists
inline constexpr uint16_t kReclaim = 1 << 1;     // repair deletes it (orphan)
inline constexpr uint16_t kDamaged = 1 << 2;     // repair moves it to /lost+found
inline constexpr uint16_t kCreated = 1 << 3;     // made by repair (root, lost+found)
inline constexpr uint16_t kRewrite = 1 << 4;     // record changes besides counts
}  // namespace inode_flags

namespace entry_flags {
inline constexpr uint8_t kDeleted = 1 << 0;  // repair deletes it
inline constexpr uint8_t kAdded = 1 << 1;    // repair adds it
}  // namespace entry_flags

struct InodeRec {
  uint64_t ino = 0;
  uint64_t size = 0;    // as stored; for files the final size after repair
  uint64_t parent = 0;  // as stored
  uint64_t ext_begin = 0;  // into Model::extents
  uint32_t ext_count = 0;
  uint32_t mode = 0;   // as stored; the final mode after repair
  uint32_t nlink = 0;  // as stored
  // Counts over the entries as stored (for the count checks).
  uint32_t names = 0;    // entries naming this inode
  uint32_t entries = 0;  // entries inside this directory
  uint32_t subdirs = 0;  // of those, entries naming an existing directory
  uint32_t orig_name = kNone;  // first valid name as stored (paths in findings)
  uint32_t name = kNone;       // the entry that names it after repair
  uint16_t flags = 0;

  bool is_dir() const { return (mode & 0170000) == 0040000; }
  bool is_reg() const { return (mode & 0170000) == 0100000; }
};

struct EntryRec {
  uint64_t parent = 0;
  uint64_t child = 0;
  uint64_t name_off = 0;  // into Model::names
  uint32_t parent_idx = kNone;  // index into Model::inodes, if that inode exists
  uint32_t child_idx = kNone;
  uint16_t name_len = 0;
  uint8_t flags = 0;
};

struct ExtentRec {
  uint64_t file_off = 0;
  Extent ext;
  uint32_t crc32c = 0;
};

// A record that failed to decode; repair deletes its key.
struct BadKey {
  std::string cf;  // column family name
  std::string key;
  uint64_t entry_parent = 0;  // for an entry key that decodes: its directory
};

// Copy `src` (one extent of a file) to `dst` (same total length) before
// the index points the file at `dst`.
struct CloneOp {
  Extent src;
  std::vector<Extent> dst;
};

class Model {
 public:
  // Loads `index` (which must outlive the Model: added inodes take their
  // numbers from it). Records that do not decode become kBadRecord findings
  // and BadKeys. Fails only if the index cannot be read.
  Status Load(index::Index& index, Progress* progress, std::vector<Finding>* findings);

  // Index of inode `ino` in `inodes`, or kNone.
  uint32_t Find(uint64_t ino) const;
  std::string_view Name(const EntryRec& e) const { return {names.data() + e.name_off, e.name_len}; }
  // "/a/b" as the index stored it (via orig_name); "<inode N>/b" where the
  // chain up to the root is broken; "<unlinked inode N>" with no name.
  std::string PathOf(uint32_t idx) const;
  // Path of the directory of `e` plus its name.
  std::string EntryPath(const EntryRec& e) const;
  // The entry `name` in directory inode `parent`, or kNone (original and
  // added entries, deleted ones excluded).
  uint32_t FindEntry(uint64_t parent, std::string_view name) const;
  // Plans a new entry; returns its index.
  uint32_t AddEntry(uint32_t parent_idx, std::string_view name, uint32_t child_idx);
  // Plans a new inode (root or lost+found); returns its index.
  uint32_t AddInode(const InodeRec& rec);

  // The extents of inode `idx` after the planned repairs.
  std::vector<ExtentRec> FinalExtents(uint32_t idx) const;
  // Replaces the extents of inode `idx` (marks it kRewrite).
  void SetExtents(uint32_t idx, std::vector<ExtentRec> extents);
  bool HasNewExtents(uint32_t idx) const { return new_extents_.count(idx) != 0; }
  // Drops extents marked by ext.len == 0 from the new lists and sorts them
  // by file offset. Checks that must keep slot numbers stable (after
  // FindSharedBlocks) mark drops that way; the checker compacts at the end.
  void CompactExtents();

  // Moves inode `idx` into /lost+found (created on first use) under
  // "#<ino>" or "#<ino>-<old name>": deletes its current name, adds the new
  // one. Returns the new path, or an error if /lost+found cannot be had
  // (the name is taken by a non-directory, or there is no root).
  Result<std::string> MoveToLostFound(uint32_t idx);

  // The final state of a live inode after the planned repairs.
  struct Final {
    uint32_t nlink = 0;
    uint64_t size = 0;
    uint64_t parent = 0;
  };
  // Computes Final for every inode from the entries after repair.
  std::vector<Final> ComputeFinal() const;

  std::vector<InodeRec> inodes;  // sorted by ino up to sorted_count_, then added
  std::vector<EntryRec> entries;  // sorted by (parent, name) up to sorted_entries_
  std::vector<ExtentRec> extents;
  std::string names;
  std::vector<uint64_t> orphan_keys;  // sorted
  std::vector<BadKey> bad_keys;
  // Planned repairs not expressed in the records above.
  std::vector<uint64_t> orphan_key_deletes;
  std::vector<CloneOp> clones;
  uint32_t lost_found = kNone;
  uint32_t root = kNone;
  // Inode numbers for added inodes (set from Index::AllocateIno by the
  // caller; the index is not written until repair).
  index::Index* index = nullptr;

 private:
  Status FindBadKeys(const index::Index& index, const char* cf);

  // ino -> index into inodes for the sorted range, when inode numbers are
  // dense enough (they are allocated sequentially) for a table to be
  // cheaper than a binary search per lookup; empty otherwise.
  std::vector<uint32_t> dense_;
  size_t sorted_count_ = 0;
  size_t sorted_entries_ = 0;
  std::unordered_map<uint32_t, std::vector<ExtentRec>> new_extents_;
  // Added entries by parent inode number, for FindEntry.
  std::unordered_multimap<uint64_t, uint32_t> added_by_parent_;
};

}  // namespace kvfs::fsck
