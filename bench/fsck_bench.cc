// kvfs-fsck-bench: builds a volume of N files directly through index::Index
// (no FUSE, no fs/), then times fsck's metadata check and, optionally, its
// --verify-data pass.
//
//   kvfs-fsck-bench [--files N] [--dirs D] [--file-bytes B] [--write-data]
//                   [--verify] [--dir DIR] [--keep] [--read-size S] [--inflight K]
//
// Files are spread over D directories under the root, each with one extent
// per 1 MiB chunk, laid out back to back in the data region as the
// allocator would on a fresh volume. Without --write-data the image is only
// allocated (fallocate) and the checksums are of zeros -- enough for the
// metadata check, which reads no data. With --write-data every file gets
// pseudo-random bytes and their crc32c, so --verify reads real data and
// finds nothing wrong. The index is compacted and reopened before checking,
// as after a restart. --keep leaves the image (for comparing with fio).
#include <stdlib.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <rocksdb/db.h>
#include <string>

#include "common/crc32c.h"
#include "common/format.h"
#include "device/block_device.h"
#include "fsck/checker.h"
#include "index/index.h"
#include "volume/format_volume.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

[[noreturn]] void Die(const std::string& what, const kvfs::Status& st) {
  std::fprintf(stderr, "kvfs-fsck-bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

void Fill(char* p, size_t len, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i + 8 <= len; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
}

struct Options {
  uint64_t files = 1000000;
  uint64_t dirs = 1000;
  uint64_t file_bytes = 4096;
  bool write_data = false;
  bool verify = false;
  bool keep = false;
  std::string dir;
  kvfs::fsck::VerifyOptions vo;
};

// Writes the data region sequentially through one big aligned buffer.
class DataWriter {
 public:
  DataWriter(kvfs::device::BlockDevice* dev, uint64_t start) : dev_(dev), off_(start) {
    buf_ = static_cast<char*>(std::aligned_alloc(kvfs::kBlockSize, kBuf));
  }
  ~DataWriter() { std::free(buf_); }
  // Space for `len` bytes at the current position (len <= kBuf).
  char* Next(uint64_t len) {
    if (used_ + len > kBuf) Flush();
    char* p = buf_ + used_;
    used_ += len;
    return p;
  }
  void Flush() {
    if (used_ == 0) return;
    kvfs::Status st = dev_->WriteAt(off_, buf_, used_);
    if (!st.ok()) Die("writing data", st);
    off_ += used_;
    used_ = 0;
  }

 private:
  static constexpr size_t kBuf = 32 << 20;
  kvfs::device::BlockDevice* dev_;
  uint64_t off_;
  char* buf_;
  size_t used_ = 0;
};

void Generate(const Options& o, const std::string& img) {
  using namespace kvfs;
  const uint64_t per_file = AlignUp(o.file_bytes, kBlockSize);
  const uint64_t image =
      std::max(kMinDeviceBytes, kDataStart + o.files * per_file + (16 << 20));
  volume::FormatOptions fo;
  fo.size_bytes = image;
  auto fr = volume::FormatVolume({img}, fo);
  if (!fr.ok()) Die("mkfs", fr.status());
  auto idx = index::Index::Open(img + ".index", index::Index::Options{});
  if (!idx.ok()) Die("index", idx.status());
  index::Index& ix = **idx;
  std::unique_ptr<device::BlockDevice> dev;
  std::unique_ptr<DataWriter> writer;
  if (o.write_data) {
    auto d = device::BlockDevice::Open(img, false);
    if (!d.ok()) Die("device", d.status());
    dev = std::move(d).value();
    writer = std::make_unique<DataWriter>(dev.get(), kDataStart);
  }
  // Checksums of zero-filled extents for the metadata-only volume.
  std::vector<char> zeros(std::min<uint64_t>(per_file, 1 << 20), 0);

  const auto t0 = Clock::now();
  index::Inode root = *ix.GetInode(kRootIno);
  std::vector<uint64_t> dir_ino(o.dirs);
  std::vector<uint64_t> dir_entries(o.dirs, 0);
  index::WriteBatch b = ix.NewBatch();
  auto commit = [&](bool force) {
    if (!force && b.count() < 20000) return;
    Status st = ix.Commit(b, false);
    if (!st.ok()) Die("commit", st);
  };
  for (uint64_t d = 0; d < o.dirs; ++d) {
    dir_ino[d] = ix.AllocateIno();
    char name[32];
    std::snprintf(name, sizeof name, "d%05llu", static_cast<unsigned long long>(d));
    b.PutEntry(kRootIno, name, dir_ino[d]);
  }
  uint64_t off = kDataStart;
  for (uint64_t i = 0; i < o.files; ++i) {
    index::Inode in;
    in.ino = ix.AllocateIno();
    in.mode = S_IFREG | 0644;
    in.nlink = 1;
    in.size = o.file_bytes;
    in.generation = 1;
    for (uint64_t pos = 0; pos < per_file; pos += 1 << 20) {
      const uint64_t len = std::min<uint64_t>(per_file - pos, 1 << 20);
      index::FileExtent fe;
      fe.file_off = pos;
      fe.ext = Extent{0, off, len};
      if (writer) {
        char* p = writer->Next(len);
        Fill(p, len, in.ino * 977 + pos);
        // Bytes past the size are zero, as fs/ pads a file's tail block.
        const uint64_t valid = o.file_bytes > pos ? std::min(len, o.file_bytes - pos) : 0;
        std::memset(p + valid, 0, len - valid);
        fe.crc32c = Crc32c(p, len);
      } else {
        fe.crc32c = Crc32c(zeros.data(), len);
      }
      in.extents.push_back(fe);
      off += len;
    }
    b.PutInode(in);
    const uint64_t d = i % o.dirs;
    char name[40];
    std::snprintf(name, sizeof name, "chunk-%010llu.bin", static_cast<unsigned long long>(i));
    b.PutEntry(dir_ino[d], name, in.ino);
    dir_entries[d]++;
    commit(false);
  }
  for (uint64_t d = 0; d < o.dirs; ++d) {
    index::Inode dir;
    dir.ino = dir_ino[d];
    dir.mode = S_IFDIR | 0755;
    dir.nlink = 2;
    dir.size = dir_entries[d];
    dir.parent = kRootIno;
    dir.generation = 1;
    b.PutInode(dir);
  }
  root.size = o.dirs;
  root.nlink = 2 + static_cast<uint32_t>(o.dirs);
  b.PutInode(root);
  commit(true);
  if (writer) writer->Flush();
  if (dev && !dev->Sync().ok()) Die("sync", Status::Error(EIO, "fdatasync"));
  if (!ix.SyncWal().ok()) Die("sync wal", Status::Error(EIO, "wal"));
  std::printf("generated %llu files in %llu directories (%.2f GiB of extents%s) in %.1f s\n",
              static_cast<unsigned long long>(o.files), static_cast<unsigned long long>(o.dirs),
              static_cast<double>(off - kDataStart) / (1ull << 30),
              o.write_data ? ", written" : ", not written", Seconds(t0));
  // Steady state, as after a restart: everything in SST files.
  const auto tc = Clock::now();
  for (const char* cf : {"default", index::kInodesCf, index::kEntriesCf, index::kOrphansCf}) {
    rocksdb::CompactRangeOptions co;
    rocksdb::Status s = ix.db()->CompactRange(co, ix.handle(cf), nullptr, nullptr);
    if (!s.ok()) Die("compact", Status::Error(EIO, s.ToString()));
  }
  std::printf("compacted the index in %.1f s\n", Seconds(tc));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Time fsck.kvfs's checks on a generated volume"};
  Options o;
  app.add_option("--files", o.files, "Files (default 1000000)");
  app.add_option("--dirs", o.dirs, "Directories under the root (default 1000)");
  app.add_option("--file-bytes", o.file_bytes, "Bytes per file (default 4096)")
      ->transform(CLI::AsSizeValue(false));
  app.add_flag("--write-data", o.write_data, "Write real bytes and checksums");
  app.add_flag("--verify", o.verify, "Also time --verify-data (needs --write-data)");
  app.add_option("--dir", o.dir, "Scratch directory (default: a new one under /var/tmp)");
  app.add_flag("--keep", o.keep, "Keep the image and index");
  app.add_option("--read-size", o.vo.read_bytes, "--verify-data read size")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--inflight", o.vo.inflight_reads, "--verify-data reads in flight");
  CLI11_PARSE(app, argc, argv);

  std::string dir = o.dir;
  if (dir.empty()) {
    char tmpl[] = "/var/tmp/kvfs-fsck-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) Die("mkdtemp", kvfs::Status::FromErrno("/var/tmp"));
    dir = tmpl;
  }
  const std::string img = dir + "/kvfs.img";
  Generate(o, img);

  kvfs::fsck::CheckOptions co;
  co.devices = {img};
  co.verify = o.vo;
  for (int pass = 0; pass < (o.verify ? 2 : 1); ++pass) {
    co.verify_data = pass == 1;
    const auto t = Clock::now();
    kvfs::fsck::Report r = kvfs::fsck::Check(co);
    const double wall = Seconds(t);
    if (!r.error.ok()) Die("fsck", r.error);
    std::printf("fsck -n%s: exit %d, %zu finding(s), wall %.2f s\n  %s\n",
                co.verify_data ? " --verify-data" : "", r.ExitCode(), r.findings.size(), wall,
                r.Summary().c_str());
    for (size_t i = 0; i < r.findings.size() && i < 5; ++i) {
      std::printf("  %s\n", r.findings[i].ToLine().c_str());
    }
  }
  if (o.keep) {
    std::printf("kept %s\n", img.c_str());
  } else {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return 0;
}
