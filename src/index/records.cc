#include "index/records.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/endian.h"
#include "common/format.h"

namespace kvfs::index {
namespace {

// Encoded sizes of version 1 records.
constexpr size_t kVolumeRecordSize = 1 + 4 + 16 + 16 + 4;
// version, mode, uid, gid, nlink, size, atime, mtime, ctime, generation,
// parent, extent count.
constexpr size_t kInodeHeaderSize = 1 + 4 * 4 + 8 + 3 * 8 + 8 + 8 + 4;
// file_off, device, byte_off, len, crc32c.
constexpr size_t kExtentSize = 8 + 4 + 8 + 8 + 4;
constexpr size_t kU64ValueSize = 1 + 8;
// Version 2 inode records: after the extents, an xattr count, then per
// attribute its name length, value length, name and value.
constexpr size_t kXattrHeaderSize = 4 + 4;

Status Malformed(std::string_view what, std::string_view why) {
  std::string c(what);
  c += ": ";
  c += why;
  return Status::Error(EUCLEAN, c);
}

// Checks the version byte and the exact length of a fixed-size value.
Status CheckFixed(std::string_view what, std::string_view v, size_t want) {
  if (v.empty()) return Malformed(what, "empty value");
  if (static_cast<uint8_t>(v[0]) != kRecordVersion) {
    return Malformed(what, "unknown record version " + std::to_string(static_cast<uint8_t>(v[0])));
  }
  if (v.size() != want) {
    return Malformed(what, "value is " + std::to_string(v.size()) + " bytes, expected " +
                               std::to_string(want));
  }
  return Status::OK();
}

std::string Hex(std::string_view b) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (char c : b) {
    s += kDigits[static_cast<uint8_t>(c) >> 4];
    s += kDigits[static_cast<uint8_t>(c) & 15];
  }
  return s;
}

std::string EncodeU64Value(uint64_t v) {
  std::string s;
  s.reserve(kU64ValueSize);
  s += static_cast<char>(kRecordVersion);
  PutFixed64(&s, v);
  return s;
}

Result<uint64_t> DecodeU64Value(std::string_view what, std::string_view v) {
  KVFS_RETURN_IF_ERROR(CheckFixed(what, v, kU64ValueSize));
  return DecodeFixed64(v.data() + 1);
}

}  // namespace

std::string VolumeRecord::Encode() const {
  std::string s;
  s.reserve(kVolumeRecordSize);
  s += static_cast<char>(kRecordVersion);
  PutFixed32(&s, format_version);
  s.append(reinterpret_cast<const char*>(volume_uuid.bytes.data()), volume_uuid.bytes.size());
  s.append(reinterpret_cast<const char*>(index_uuid.bytes.data()), index_uuid.bytes.size());
  PutFixed32(&s, device_count);
  return s;
}

Result<VolumeRecord> VolumeRecord::Decode(std::string_view v) {
  KVFS_RETURN_IF_ERROR(CheckFixed("volume record", v, kVolumeRecordSize));
  VolumeRecord r;
  const char* p = v.data() + 1;
  r.format_version = DecodeFixed32(p);
  p += 4;
  std::memcpy(r.volume_uuid.bytes.data(), p, 16);
  p += 16;
  std::memcpy(r.index_uuid.bytes.data(), p, 16);
  p += 16;
  r.device_count = DecodeFixed32(p);
  return r;
}

std::string Inode::Encode() const {
  std::string s;
  size_t xattr_bytes = 0;
  for (const Xattr& x : xattrs) xattr_bytes += kXattrHeaderSize + x.name.size() + x.value.size();
  s.reserve(kInodeHeaderSize + extents.size() * kExtentSize + (xattrs.empty() ? 0 : 4) +
            xattr_bytes);
  s += static_cast<char>(xattrs.empty() ? kRecordVersion : kInodeXattrVersion);
  PutFixed32(&s, mode);
  PutFixed32(&s, uid);
  PutFixed32(&s, gid);
  PutFixed32(&s, nlink);
  PutFixed64(&s, size);
  PutFixed64(&s, static_cast<uint64_t>(atime_ns));
  PutFixed64(&s, static_cast<uint64_t>(mtime_ns));
  PutFixed64(&s, static_cast<uint64_t>(ctime_ns));
  PutFixed64(&s, generation);
  PutFixed64(&s, parent);
  PutFixed32(&s, static_cast<uint32_t>(extents.size()));
  for (const FileExtent& e : extents) {
    PutFixed64(&s, e.file_off);
    PutFixed32(&s, e.ext.device);
    PutFixed64(&s, e.ext.byte_off);
    PutFixed64(&s, e.ext.len);
    PutFixed32(&s, e.crc32c);
  }
  if (!xattrs.empty()) {
    PutFixed32(&s, static_cast<uint32_t>(xattrs.size()));
    for (const Xattr& x : xattrs) {
      PutFixed32(&s, static_cast<uint32_t>(x.name.size()));
      PutFixed32(&s, static_cast<uint32_t>(x.value.size()));
      s += x.name;
      s += x.value;
    }
  }
  return s;
}

Result<Inode> Inode::Decode(uint64_t ino, std::string_view v) {
  const std::string what = "inode " + std::to_string(ino);
  if (v.empty()) return Malformed(what, "empty value");
  const auto version = static_cast<uint8_t>(v[0]);
  if (version != kRecordVersion && version != kInodeXattrVersion) {
    return Malformed(what, "unknown record version " + std::to_string(version));
  }
  if (v.size() < kInodeHeaderSize) {
    return Malformed(what, "value is " + std::to_string(v.size()) + " bytes, shorter than the " +
                               std::to_string(kInodeHeaderSize) + "-byte header");
  }
  Inode n;
  n.ino = ino;
  const char* p = v.data() + 1;
  n.mode = DecodeFixed32(p);
  n.uid = DecodeFixed32(p + 4);
  n.gid = DecodeFixed32(p + 8);
  n.nlink = DecodeFixed32(p + 12);
  p += 16;
  n.size = DecodeFixed64(p);
  n.atime_ns = static_cast<int64_t>(DecodeFixed64(p + 8));
  n.mtime_ns = static_cast<int64_t>(DecodeFixed64(p + 16));
  n.ctime_ns = static_cast<int64_t>(DecodeFixed64(p + 24));
  n.generation = DecodeFixed64(p + 32);
  n.parent = DecodeFixed64(p + 40);
  p += 48;
  const uint32_t count = DecodeFixed32(p);
  p += 4;
  // Compare without multiplying so a huge bogus count cannot overflow, and
  // before reserving so it cannot make us allocate.
  const size_t tail = v.size() - kInodeHeaderSize;
  if (version == kRecordVersion) {
    if (tail % kExtentSize != 0 || tail / kExtentSize != count) {
      return Malformed(what, "extent count " + std::to_string(count) + " does not match " +
                                 std::to_string(tail) + " bytes of extents");
    }
  } else if (tail / kExtentSize < count || tail - size_t{count} * kExtentSize < 4) {
    return Malformed(what, "extent count " + std::to_string(count) + " leaves no room in " +
                               std::to_string(tail) + " bytes for extents and attributes");
  }
  n.extents.resize(count);
  for (FileExtent& e : n.extents) {
    e.file_off = DecodeFixed64(p);
    e.ext.device = DecodeFixed32(p + 8);
    e.ext.byte_off = DecodeFixed64(p + 12);
    e.ext.len = DecodeFixed64(p + 20);
    e.crc32c = DecodeFixed32(p + 28);
    p += kExtentSize;
  }
  if (version == kRecordVersion) return n;

  const char* const end = v.data() + v.size();
  const uint32_t xcount = DecodeFixed32(p);
  p += 4;
  if (xcount == 0) return Malformed(what, "version 2 record without attributes");
  // Each attribute takes at least its 8-byte header: bounds the count
  // before anything is reserved.
  if (xcount > static_cast<size_t>(end - p) / kXattrHeaderSize) {
    return Malformed(what, "attribute count " + std::to_string(xcount) + " does not fit " +
                               std::to_string(end - p) + " bytes");
  }
  n.xattrs.resize(xcount);
  for (uint32_t k = 0; k < xcount; ++k) {
    if (static_cast<size_t>(end - p) < kXattrHeaderSize) {
      return Malformed(what, "attribute " + std::to_string(k) + " is cut short");
    }
    const uint32_t name_len = DecodeFixed32(p);
    const uint32_t value_len = DecodeFixed32(p + 4);
    p += kXattrHeaderSize;
    const auto left = static_cast<size_t>(end - p);
    if (name_len == 0 || name_len > left || value_len > left - name_len) {
      return Malformed(what, "attribute " + std::to_string(k) + " (name " +
                                 std::to_string(name_len) + " bytes, value " +
                                 std::to_string(value_len) + " bytes) does not fit the record");
    }
    Xattr& x = n.xattrs[k];
    x.name.assign(p, name_len);
    x.value.assign(p + name_len, value_len);
    p += name_len + value_len;
    if (k > 0 && !(n.xattrs[k - 1].name < x.name)) {
      return Malformed(what, "attribute names out of order or repeated at " + std::to_string(k));
    }
  }
  if (p != end) {
    return Malformed(what, std::to_string(end - p) + " bytes after the last attribute");
  }
  return n;
}

bool IsStoredXattrName(std::string_view name) {
  constexpr std::string_view kUser = "user.", kTrusted = "trusted.", kReserved = "user.kvfs.";
  if (name == kEvictXattr) return true;
  if (name.starts_with(kReserved)) return false;
  if (name.starts_with(kUser)) return name.size() > kUser.size();
  if (name.starts_with(kTrusted)) return name.size() > kTrusted.size();
  return false;
}

namespace {

// Why `x` alone breaks the rules, or empty.
std::string XattrProblem(const Xattr& x) {
  if (x.name.size() > kXattrNameMax) {
    return "name of " + std::to_string(x.name.size()) + " bytes (at most " +
           std::to_string(kXattrNameMax) + ")";
  }
  if (!IsStoredXattrName(x.name)) return "a name kvfs does not store";
  if (x.value.size() > kXattrValueMax) {
    return "value of " + std::to_string(x.value.size()) + " bytes (at most " +
           std::to_string(kXattrValueMax) + ")";
  }
  return {};
}

}  // namespace

Status CheckXattrs(const std::vector<Xattr>& list) {
  size_t total = 0, names = 0;
  for (const Xattr& x : list) {
    std::string why = XattrProblem(x);
    if (why.empty()) {
      total += x.name.size() + 1 + x.value.size();
      names += x.name.size() + 1;
      if (total > kXattrInodeMax || names > kXattrListMax) why = "past the per-inode total";
    }
    if (!why.empty()) {
      return Status::Error(EUCLEAN, "extended attribute '" + x.name.substr(0, 64) + "': " + why);
    }
  }
  return Status::OK();
}

size_t RepairXattrs(std::vector<Xattr>& list) {
  std::vector<Xattr> kept;
  size_t total = 0, names = 0;
  for (Xattr& x : list) {
    if (!XattrProblem(x).empty()) continue;
    const size_t t = total + x.name.size() + 1 + x.value.size();
    const size_t n = names + x.name.size() + 1;
    if (t > kXattrInodeMax || n > kXattrListMax) continue;
    total = t;
    names = n;
    kept.push_back(std::move(x));
  }
  const size_t dropped = list.size() - kept.size();
  list = std::move(kept);
  return dropped;
}

std::string InodeKey(uint64_t ino) {
  std::string k;
  k.reserve(8);
  PutBigEndian64(&k, ino);
  return k;
}

Result<uint64_t> DecodeInodeKey(std::string_view key) {
  if (key.size() != 8) {
    return Malformed("key " + KeyToString(key),
                     std::to_string(key.size()) + " bytes, expected an 8-byte inode number");
  }
  return DecodeBigEndian64(key.data());
}

std::string EntryPrefix(uint64_t parent) { return InodeKey(parent); }

std::string EntryKey(uint64_t parent, std::string_view name) {
  std::string k;
  k.reserve(8 + name.size());
  PutBigEndian64(&k, parent);
  k.append(name);
  return k;
}

Result<EntryKeyParts> DecodeEntryKey(std::string_view key) {
  if (key.size() <= 8 || key.size() > 8 + kMaxNameLen) {
    return Malformed("entry key " + KeyToString(key),
                     std::to_string(key.size()) + " bytes, expected a parent and a name of 1.." +
                         std::to_string(kMaxNameLen) + " bytes");
  }
  return EntryKeyParts{DecodeBigEndian64(key.data()), key.substr(8)};
}

std::string EncodeEntryValue(uint64_t child) { return EncodeU64Value(child); }
Result<uint64_t> DecodeEntryValue(std::string_view v) { return DecodeU64Value("entry value", v); }
std::string EncodeNextIno(uint64_t next_ino) { return EncodeU64Value(next_ino); }
Result<uint64_t> DecodeNextIno(std::string_view v) { return DecodeU64Value("next_ino record", v); }
std::string EncodeOrphanValue() { return std::string(1, static_cast<char>(kRecordVersion)); }
Status DecodeOrphanValue(std::string_view v) { return CheckFixed("orphan record", v, 1); }

std::string KeyToString(std::string_view key) {
  if (key.size() <= 8) return Hex(key);
  std::string s = Hex(key.substr(0, 8));
  s += "/'";
  for (char c : key.substr(8)) {
    const auto u = static_cast<uint8_t>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\' && c != '\'') {
      s += c;
    } else {
      char b[5];
      std::snprintf(b, sizeof b, "\\x%02x", u);
      s += b;
    }
  }
  s += '\'';
  return s;
}

}  // namespace kvfs::index
