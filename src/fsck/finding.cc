#include "fsck/finding.h"

#include <cstdio>

namespace kvfs::fsck {

namespace {

// Names are arbitrary bytes: a newline or escape in one must not break the
// one-line-per-finding output or drive the terminal.
std::string Printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\\') {
      char b[5];
      std::snprintf(b, sizeof b, "\\x%02x", u);
      out += b;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string_view KindName(FindingKind kind) {
  switch (kind) {
    case FindingKind::kSuperblock: return "superblock";
    case FindingKind::kBadRecord: return "bad_record";
    case FindingKind::kMissingRoot: return "missing_root";
    case FindingKind::kDanglingEntry: return "dangling_entry";
    case FindingKind::kBadParent: return "bad_parent";
    case FindingKind::kDirLoop: return "dir_loop";
    case FindingKind::kMultipleNames: return "multiple_names";
    case FindingKind::kUnreachable: return "unreachable";
    case FindingKind::kOrphan: return "orphan";
    case FindingKind::kOrphanKey: return "orphan_key";
    case FindingKind::kNlink: return "nlink";
    case FindingKind::kEntryCount: return "entry_count";
    case FindingKind::kDirParent: return "dir_parent";
    case FindingKind::kBadMode: return "bad_mode";
    case FindingKind::kDirExtents: return "dir_extents";
    case FindingKind::kBadExtent: return "bad_extent";
    case FindingKind::kSharedBlocks: return "shared_blocks";
    case FindingKind::kBadChecksum: return "bad_checksum";
    case FindingKind::kReadError: return "read_error";
    case FindingKind::kBadXattr: return "bad_xattr";
  }
  return "unknown";
}

std::string Finding::ToLine() const {
  std::string s(KindName(kind));
  if (!path.empty()) {
    s += ' ';
    s += path;
  }
  if (ino != 0 && path.find("inode " + std::to_string(ino)) == std::string::npos) {
    s += path.empty() ? " inode " : " (inode ";
    s += std::to_string(ino);
    if (!path.empty()) s += ')';
  }
  s += ": ";
  s += problem;
  if (severity == Severity::kInfo) {
    s += fix.empty() ? "" : " (" + fix + ")";
  } else if (fix.empty()) {
    s += " (cannot be repaired)";
  } else {
    s += repaired ? " (repaired: " : " (-y: ";
    s += fix;
    s += ')';
  }
  return Printable(s);
}

}  // namespace kvfs::fsck
