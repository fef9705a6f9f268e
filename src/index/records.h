// The records kvfs keeps in its RocksDB index, and their encodings.
//
// Column families and keys (see index.cc for tuning):
//   "default": "volume" -> VolumeRecord
//              "next_ino" -> version + fixed64 (written as a merge operand
//                            that keeps the maximum, see index.cc)
//   "inodes":  ino (8 bytes big-endian)                 -> Inode (with its
//                                                          extended attributes)
//   "entries": parent ino (8 bytes big-endian) + name   -> version + child ino (fixed64)
//   "orphans": ino (8 bytes big-endian)                 -> version byte only
//                                                          (unlinked while open,
//                                                          or O_TMPFILE not linked)
// Big-endian keys so that RocksDB's byte order is numeric order and the
// entries of one directory are contiguous and sorted by name (readdir).
//
// Values start with a one-byte record version so the format can evolve; the
// integers after it are fixed-width little-endian (common/endian.h). Every
// Decode checks the version and the exact length before reading and returns
// EUCLEAN with the record named on anything malformed; it never reads out of
// bounds, whatever the bytes.
//
// An inode's extended attributes live in its own record (version 2; an
// inode without any is written as version 1, which older builds read), so
// they are committed, renamed and removed with the inode by construction:
// no attribute can outlive its inode or name another, and reading one
// costs no index lookup beyond the inode's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/extent.h"
#include "common/status.h"
#include "common/uuid.h"

namespace kvfs::index {

// Column family names and the keys of the default family.
inline constexpr char kInodesCf[] = "inodes";
inline constexpr char kEntriesCf[] = "entries";
inline constexpr char kOrphansCf[] = "orphans";
inline constexpr std::string_view kVolumeKey = "volume";
inline constexpr std::string_view kNextInoKey = "next_ino";
// The version byte every value written by this build starts with.
inline constexpr uint8_t kRecordVersion = 1;
// The version of an inode record that carries extended attributes.
inline constexpr uint8_t kInodeXattrVersion = 2;

// Extended-attribute limits kvfs enforces (fs/xattr.h) and fsck checks.
// Value: Linux's XATTR_SIZE_MAX. Per inode: names (each with its NUL) plus
// values; the names alone also fit the kernel's 64 KiB listxattr buffer.
inline constexpr size_t kXattrNameMax = 255;
inline constexpr size_t kXattrValueMax = 64 << 10;
inline constexpr size_t kXattrInodeMax = 128 << 10;
inline constexpr size_t kXattrListMax = 64 << 10;

// One extended attribute: the full name ("user.vllm.kv_crc32c") and value.
struct Xattr {
  std::string name;
  std::string value;
  bool operator==(const Xattr&) const = default;
};

// A directory's eviction scope mark (fs/eviction.h): "lru" or "off", the
// one user.kvfs.* name that is stored.
inline constexpr std::string_view kEvictXattr = "user.kvfs.evict";
// True for the names kvfs stores: "user." or "trusted." and a non-empty
// rest, not under the reserved "user.kvfs." but kEvictXattr (fs/xattr.h
// has the rules).
bool IsStoredXattrName(std::string_view name);
// For fsck: OK if `list` is what fs/ writes (stored names of at most
// kXattrNameMax bytes, values of at most kXattrValueMax, the per-inode
// totals), else EUCLEAN naming the first attribute that is not.
Status CheckXattrs(const std::vector<Xattr>& list);
// Drops what CheckXattrs reports: attributes with a bad name or value,
// then, in name order, those past the per-inode totals. Returns how many
// were dropped.
size_t RepairXattrs(std::vector<Xattr>& list);

struct VolumeRecord {
  uint32_t format_version = 0;
  Uuid volume_uuid;
  Uuid index_uuid;
  uint32_t device_count = 0;

  std::string Encode() const;
  static Result<VolumeRecord> Decode(std::string_view v);
  bool operator==(const VolumeRecord&) const = default;
};

// A piece of a file's data: file bytes [file_off, file_off + ext.len) live in
// `ext`. `crc32c` covers all ext.len bytes on the device (a file's tail block
// is zero-padded before it is written).
struct FileExtent {
  uint64_t file_off = 0;  // kBlockSize aligned
  Extent ext;
  uint32_t crc32c = 0;
  bool operator==(const FileExtent&) const = default;
};

struct Inode {
  uint64_t ino = 0;
  uint32_t mode = 0;  // S_IFREG / S_IFDIR | permission bits
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t nlink = 0;
  uint64_t size = 0;  // bytes; for a directory, its entry count
  int64_t atime_ns = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t generation = 0;
  uint64_t parent = 0;  // a directory's parent (for "..", loop checks); 0 for files
  // Sorted by file_off, non-overlapping. Bytes below `size` not covered by an
  // extent read as zeros (holes); extents never reach past AlignUp(size).
  std::vector<FileExtent> extents;
  // Sorted by name, names unique. Decode accepts any lengths that fit the
  // value (fsck reports those past the limits above); fs/ never writes them.
  std::vector<Xattr> xattrs;

  std::string Encode() const;
  static Result<Inode> Decode(uint64_t ino, std::string_view v);
  bool operator==(const Inode&) const = default;
};

// Keys. InodeKey is also the orphans key.
std::string InodeKey(uint64_t ino);
// EUCLEAN unless `key` is exactly 8 bytes.
Result<uint64_t> DecodeInodeKey(std::string_view key);
// The 8-byte prefix shared by every entry of `parent`.
std::string EntryPrefix(uint64_t parent);
std::string EntryKey(uint64_t parent, std::string_view name);
struct EntryKeyParts {
  uint64_t parent = 0;
  std::string_view name;  // points into the decoded key
};
// EUCLEAN unless `key` is an 8-byte parent and a name of 1..kMaxNameLen bytes.
Result<EntryKeyParts> DecodeEntryKey(std::string_view key);

// Values other than the two records above.
std::string EncodeEntryValue(uint64_t child);
Result<uint64_t> DecodeEntryValue(std::string_view v);
std::string EncodeNextIno(uint64_t next_ino);
Result<uint64_t> DecodeNextIno(std::string_view v);
std::string EncodeOrphanValue();
Status DecodeOrphanValue(std::string_view v);

// `key` printable for error messages: hex, with a printable tail for entry
// names ("0000000000000001/'foo'").
std::string KeyToString(std::string_view key);

}  // namespace kvfs::index
