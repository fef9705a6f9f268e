// Encodings of index records: round trips, key order, and rejection of
// malformed values (the decoders must never read out of bounds; run under
// ASan to make that a real check).
#include "index/records.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <random>

#include "common/endian.h"
#include "common/format.h"

namespace kvfs::index {
namespace {

VolumeRecord SampleVolume() {
  VolumeRecord v;
  v.format_version = kFormatVersion;
  v.volume_uuid = Uuid::Random();
  v.index_uuid = Uuid::Random();
  v.device_count = 3;
  return v;
}

Inode SampleInode(uint64_t ino, int extents) {
  Inode n;
  n.ino = ino;
  n.mode = S_IFREG | 0640;
  n.uid = 1000;
  n.gid = 0xfffffffe;
  n.nlink = 1;
  n.size = 3 * kBlockSize * static_cast<uint64_t>(extents) - 17;
  n.atime_ns = -5;  // before 1970: signed times must survive
  n.mtime_ns = std::numeric_limits<int64_t>::max();
  n.ctime_ns = std::numeric_limits<int64_t>::min();
  n.generation = 0x0123456789abcdefULL;
  for (int i = 0; i < extents; ++i) {
    FileExtent e;
    e.file_off = static_cast<uint64_t>(i) * 3 * kBlockSize;
    e.ext.device = static_cast<uint32_t>(i % 2);
    e.ext.byte_off = kDataStart + (static_cast<uint64_t>(i) << 33);
    e.ext.len = 3 * kBlockSize;
    e.crc32c = 0xdeadbeef ^ static_cast<uint32_t>(i);
    n.extents.push_back(e);
  }
  return n;
}

TEST(VolumeRecordTest, RoundTrips) {
  VolumeRecord v = SampleVolume();
  std::string enc = v.Encode();
  EXPECT_EQ(static_cast<uint8_t>(enc[0]), kRecordVersion);
  Result<VolumeRecord> d = VolumeRecord::Decode(enc);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, v);
}

TEST(VolumeRecordTest, EncodingIsLittleEndianFixedWidth) {
  VolumeRecord v;
  v.format_version = 0x01020304;
  v.device_count = 0x0a0b0c0d;
  std::string enc = v.Encode();
  ASSERT_EQ(enc.size(), 1u + 4 + 16 + 16 + 4);
  EXPECT_EQ(enc.substr(1, 4), std::string("\x04\x03\x02\x01", 4));
  EXPECT_EQ(enc.substr(37, 4), std::string("\x0d\x0c\x0b\x0a", 4));
}

TEST(VolumeRecordTest, TruncatedExtendedOrWrongVersionIsEuclean) {
  std::string enc = SampleVolume().Encode();
  for (size_t len = 0; len < enc.size(); ++len) {
    Result<VolumeRecord> d = VolumeRecord::Decode(std::string_view(enc).substr(0, len));
    ASSERT_FALSE(d.ok()) << "length " << len;
    EXPECT_EQ(d.status().code(), EUCLEAN);
  }
  EXPECT_EQ(VolumeRecord::Decode(enc + "x").status().code(), EUCLEAN);
  for (uint8_t version : {0, 2, 255}) {
    std::string bad = enc;
    bad[0] = static_cast<char>(version);
    Result<VolumeRecord> d = VolumeRecord::Decode(bad);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), EUCLEAN);
    EXPECT_NE(d.status().context().find("version"), std::string::npos) << d.status().ToString();
  }
}

TEST(InodeTest, RoundTripsWithSeveralExtents) {
  Inode n = SampleInode(42, 5);
  Result<Inode> d = Inode::Decode(42, n.Encode());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, n);
  ASSERT_EQ(d->extents.size(), 5u);
  EXPECT_EQ(d->extents[4].ext.byte_off, kDataStart + (4ULL << 33));
}

TEST(InodeTest, RoundTripsWithoutExtents) {
  Inode n = SampleInode(7, 0);
  n.mode = S_IFDIR | 0755;
  Result<Inode> d = Inode::Decode(7, n.Encode());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, n);
}

TEST(InodeTest, DecodeTakesTheInodeNumberFromTheKey) {
  Inode n = SampleInode(42, 1);
  Result<Inode> d = Inode::Decode(99, n.Encode());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->ino, 99u);
}

TEST(InodeTest, EveryTruncationIsEucleanNamingTheInode) {
  std::string enc = SampleInode(42, 3).Encode();
  for (size_t len = 0; len < enc.size(); ++len) {
    Result<Inode> d = Inode::Decode(42, std::string_view(enc).substr(0, len));
    ASSERT_FALSE(d.ok()) << "length " << len;
    EXPECT_EQ(d.status().code(), EUCLEAN);
    EXPECT_NE(d.status().context().find("inode 42"), std::string::npos) << d.status().ToString();
  }
}

TEST(InodeTest, TrailingBytesAreEuclean) {
  std::string enc = SampleInode(42, 2).Encode();
  EXPECT_EQ(Inode::Decode(42, enc + std::string(32, '\0')).status().code(), EUCLEAN);
  EXPECT_EQ(Inode::Decode(42, enc + "x").status().code(), EUCLEAN);
}

TEST(InodeTest, WrongVersionIsEuclean) {
  std::string enc = SampleInode(42, 1).Encode();
  for (uint8_t version : {0, 2, 200}) {
    enc[0] = static_cast<char>(version);
    Result<Inode> d = Inode::Decode(42, enc);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), EUCLEAN);
  }
}

TEST(InodeTest, HugeExtentCountIsEucleanWithoutAllocating) {
  Inode n = SampleInode(42, 1);
  std::string enc = n.Encode();
  // The count sits right before the extents.
  const size_t count_off = enc.size() - 32 - 4;
  ASSERT_EQ(DecodeFixed32(enc.data() + count_off), 1u);
  for (uint32_t count : {0u, 2u, 0x08000000u, 0xffffffffu}) {
    EncodeFixed32(enc.data() + count_off, count);
    Result<Inode> d = Inode::Decode(42, enc);
    ASSERT_FALSE(d.ok()) << count;
    EXPECT_EQ(d.status().code(), EUCLEAN);
  }
}

TEST(InodeTest, RandomBytesNeverDecodeOutOfBounds) {
  std::mt19937_64 rng(12345);
  const std::string good = SampleInode(1, 2).Encode();
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string v;
    if (i % 2 == 0) {
      v.resize(rng() % 200);
      for (char& c : v) c = static_cast<char>(rng());
      if (!v.empty() && i % 4 == 0) v[0] = static_cast<char>(kRecordVersion);
    } else {
      v = good;  // flip a few bytes of a valid record, maybe truncate
      for (int j = 0; j < 3; ++j) v[rng() % v.size()] = static_cast<char>(rng());
      if (rng() % 2) v.resize(rng() % v.size());
    }
    Result<Inode> d = Inode::Decode(1, v);
    if (d.ok()) {
      ++accepted;
      EXPECT_EQ(d->Encode(), v);  // anything accepted is exactly a valid encoding
    } else {
      EXPECT_EQ(d.status().code(), EUCLEAN);
    }
  }
  EXPECT_GT(accepted, 0);
}

TEST(KeysTest, InodeKeysSortNumerically) {
  EXPECT_LT(InodeKey(255), InodeKey(256));
  EXPECT_LT(InodeKey(1), InodeKey(1ULL << 56));
  EXPECT_EQ(InodeKey(1), std::string("\0\0\0\0\0\0\0\1", 8));
  Result<uint64_t> k = DecodeInodeKey(InodeKey(0x0102030405060708ULL));
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, 0x0102030405060708ULL);
  EXPECT_EQ(DecodeInodeKey("short").status().code(), EUCLEAN);
  EXPECT_EQ(DecodeInodeKey(std::string(9, 'x')).status().code(), EUCLEAN);
}

TEST(KeysTest, EntryKeysGroupByParentThenSortByName) {
  EXPECT_LT(EntryKey(1, "zzz"), EntryKey(2, "a"));
  EXPECT_LT(EntryKey(2, "a"), EntryKey(2, "ab"));
  EXPECT_LT(EntryKey(2, "ab"), EntryKey(2, "b"));
  EXPECT_EQ(EntryKey(2, "x").substr(0, 8), EntryPrefix(2));
  const std::string key = EntryKey(77, "name.bin");
  Result<EntryKeyParts> p = DecodeEntryKey(key);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->parent, 77u);
  EXPECT_EQ(p->name, "name.bin");
}

TEST(KeysTest, EntryKeyWithEmptyOrTooLongNameIsEuclean) {
  EXPECT_EQ(DecodeEntryKey(EntryPrefix(3)).status().code(), EUCLEAN);
  EXPECT_EQ(DecodeEntryKey("abc").status().code(), EUCLEAN);
  EXPECT_TRUE(DecodeEntryKey(EntryKey(3, std::string(kMaxNameLen, 'n'))).ok());
  EXPECT_EQ(DecodeEntryKey(EntryKey(3, std::string(kMaxNameLen + 1, 'n'))).status().code(),
            EUCLEAN);
}

TEST(ValuesTest, EntryNextInoAndOrphanValuesRoundTrip) {
  for (uint64_t v : {0ULL, 1ULL, 0x8000000000000001ULL, ~0ULL}) {
    Result<uint64_t> e = DecodeEntryValue(EncodeEntryValue(v));
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(*e, v);
    Result<uint64_t> n = DecodeNextIno(EncodeNextIno(v));
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, v);
  }
  EXPECT_TRUE(DecodeOrphanValue(EncodeOrphanValue()).ok());
}

TEST(ValuesTest, MalformedSmallValuesAreEuclean) {
  std::string e = EncodeEntryValue(5);
  for (size_t len = 0; len < e.size(); ++len) {
    EXPECT_EQ(DecodeEntryValue(e.substr(0, len)).status().code(), EUCLEAN);
    EXPECT_EQ(DecodeNextIno(e.substr(0, len)).status().code(), EUCLEAN);
  }
  EXPECT_EQ(DecodeEntryValue(e + "x").status().code(), EUCLEAN);
  e[0] = 9;
  EXPECT_EQ(DecodeEntryValue(e).status().code(), EUCLEAN);
  EXPECT_EQ(DecodeOrphanValue("").code(), EUCLEAN);
  EXPECT_EQ(DecodeOrphanValue(std::string(1, '\2')).code(), EUCLEAN);
  EXPECT_EQ(DecodeOrphanValue(EncodeOrphanValue() + "x").code(), EUCLEAN);
}

TEST(KeysTest, KeyToStringIsPrintable) {
  EXPECT_EQ(KeyToString(InodeKey(0x1f)), "000000000000001f");
  EXPECT_EQ(KeyToString(EntryKey(2, std::string("a\n'", 3))),
            "0000000000000002/'a\\x0a\\x27'");
}

}  // namespace
}  // namespace kvfs::index

namespace kvfs::index {
namespace {

Inode WithXattrs() {
  Inode in;
  in.ino = 7;
  in.mode = S_IFREG | 0644;
  in.size = 5000;
  in.extents = {FileExtent{0, Extent{0, 1 << 20, 8192}, 42}};
  in.xattrs = {{"user.a", ""}, {"user.vllm.kv_crc32c", "1234"}, {"trusted.x", std::string(300, 'v')}};
  std::sort(in.xattrs.begin(), in.xattrs.end(),
            [](const Xattr& a, const Xattr& b) { return a.name < b.name; });
  return in;
}

TEST(XattrRecordTest, InodeWithoutAttributesKeepsVersionOne) {
  Inode in = WithXattrs();
  in.xattrs.clear();
  EXPECT_EQ(static_cast<uint8_t>(in.Encode()[0]), kRecordVersion);
}

TEST(XattrRecordTest, AttributesRoundTripInVersionTwo) {
  const Inode in = WithXattrs();
  const std::string enc = in.Encode();
  EXPECT_EQ(static_cast<uint8_t>(enc[0]), kInodeXattrVersion);
  Result<Inode> out = Inode::Decode(7, enc);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, in);
}

TEST(XattrRecordTest, EveryTruncationOrByteFlipFailsCleanly) {
  const std::string enc = WithXattrs().Encode();
  for (size_t n = 0; n < enc.size(); ++n) {
    Result<Inode> r = Inode::Decode(7, std::string_view(enc).substr(0, n));
    EXPECT_FALSE(r.ok()) << n;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), EUCLEAN);
    }
  }
  std::mt19937 rng(5);
  for (int k = 0; k < 2000; ++k) {
    std::string v = enc;
    v[rng() % v.size()] = static_cast<char>(rng());
    Result<Inode> r = Inode::Decode(7, v);  // never out of bounds, whatever it says
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), EUCLEAN);
    }
  }
  std::string extra = enc + "x";
  EXPECT_FALSE(Inode::Decode(7, extra).ok());
}

TEST(XattrRecordTest, UnsortedOrRepeatedNamesAreMalformed) {
  Inode in = WithXattrs();
  std::swap(in.xattrs[0], in.xattrs[1]);
  EXPECT_EQ(Inode::Decode(7, in.Encode()).status().code(), EUCLEAN);
  in = WithXattrs();
  in.xattrs[1].name = in.xattrs[0].name;
  EXPECT_EQ(Inode::Decode(7, in.Encode()).status().code(), EUCLEAN);
}

TEST(XattrRecordTest, CheckAndRepairEnforceTheLimits) {
  std::vector<Xattr> ok = WithXattrs().xattrs;
  EXPECT_TRUE(CheckXattrs(ok).ok());
  std::vector<Xattr> bad = ok;
  bad.push_back({"user.z", std::string(kXattrValueMax + 1, 'v')});
  EXPECT_EQ(CheckXattrs(bad).code(), EUCLEAN);
  EXPECT_EQ(RepairXattrs(bad), 1u);
  EXPECT_EQ(bad, ok);
  EXPECT_FALSE(IsStoredXattrName("user."));
  EXPECT_FALSE(IsStoredXattrName("user.kvfs.prefetch"));
  EXPECT_TRUE(IsStoredXattrName("user.kvfs.evict"));
  EXPECT_FALSE(IsStoredXattrName("security.capability"));
  EXPECT_TRUE(IsStoredXattrName("trusted.t"));
}

}  // namespace
}  // namespace kvfs::index
