// Finding: one problem fsck.kvfs found, with what repair does about it.
//
// Every finding names what it is about (a path, an inode, a device) and is
// printed as one line (ToLine) or as one JSON object (report_json.h). Kinds
// have stable names ("dangling_entry", ...) for scripts and tests.
//
// Thread safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvfs::fsck {

enum class FindingKind : uint8_t {
  kSuperblock,     // a device's superblock is damaged (not repairable)
  kBadRecord,      // an index record that does not decode
  kMissingRoot,    // the root directory inode is missing or not a directory
  kDanglingEntry,  // a directory entry names an inode that does not exist
  kBadParent,      // an entry lives in a missing inode or in a non-directory
  kDirLoop,        // an entry names the root, or directories form a cycle
  kMultipleNames,  // a file or directory has more than one name
  kUnreachable,    // an inode with no name that is not an orphan
  kOrphan,         // unlinked while open, never released (crash)
  kOrphanKey,      // an orphan record that is stale (missing or named inode)
  kNlink,          // stored link count differs from the entries
  kEntryCount,     // a directory's size (entry count) differs from its entries
  kDirParent,      // a directory's parent field differs from its entry
  kBadMode,        // neither a regular file nor a directory
  kDirExtents,     // a directory that owns extents
  kBadExtent,      // an extent outside the data region, misaligned, past EOF...
  kSharedBlocks,   // blocks used by two extents
  kBadChecksum,    // --verify-data: an extent's bytes fail their crc32c
  kReadError,      // --verify-data: an extent cannot be read
  kBadXattr,       // extended attributes past kvfs's rules (name, size, totals)
};

// The stable name of `kind` ("dangling_entry").
std::string_view KindName(FindingKind kind);

enum class Severity : uint8_t {
  kError,  // counts towards the exit code
  kInfo,   // expected state worth telling (an orphan of a mounted volume)
};

struct Finding {
  FindingKind kind = FindingKind::kBadRecord;
  Severity severity = Severity::kError;
  uint64_t ino = 0;     // the inode concerned; 0 if none
  std::string path;     // "/a/b", "<inode 12>/name", a device path; may be empty
  std::string problem;  // what is wrong
  std::string fix;      // what repair (-y) does; empty: fsck cannot repair it
  bool repaired = false;

  bool repairable() const { return !fix.empty(); }
  // "dangling_entry /a/b (inode 99): <problem> (-y: <fix>)", with
  // "repaired: " instead of "-y: " once repaired and "cannot be repaired"
  // when there is no fix.
  std::string ToLine() const;
};

}  // namespace kvfs::fsck
