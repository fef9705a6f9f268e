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
  s.reserve(kInodeHeaderSize + extents.size() * kExtentSize);
  s += static_cast<char>(kRecordVersion);
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
  return s;
}

Result<Inode> Inode::Decode(uint64_t ino, std::string_view v) {
  const std::string what = "inode " + std::to_string(ino);
  if (v.empty()) return Malformed(what, "empty value");
  if (static_cast<uint8_t>(v[0]) != kRecordVersion) {
    return Malformed(what, "unknown record version " + std::to_string(static_cast<uint8_t>(v[0])));
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
  if (tail % kExtentSize != 0 || tail / kExtentSize != count) {
    return Malformed(what, "extent count " + std::to_string(count) + " does not match " +
                               std::to_string(tail) + " bytes of extents");
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
  return n;
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
