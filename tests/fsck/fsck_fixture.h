// Fixture for fsck tests: a real image file and RocksDB index, filled through
// the real filesystem (fs/), then damaged by writing index records and device
// bytes directly, then checked with fsck::Check.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/format.h"
#include "device/block_device.h"
#include "fs/file_system.h"
#include "fsck/checker.h"
#include "index/index.h"
#include "util/pattern.h"
#include "util/flip_byte.h"
#include "util/temp_dir.h"
#include "volume/format_volume.h"
#include "volume/volume.h"

namespace kvfs::fsck {

using kvfs::testing::Pattern;

class FsckTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kImageBytes = 64 << 20;

  void SetUp() override {
    img_ = dir_.Join("vol.img");
    volume::FormatOptions fo;
    fo.size_bytes = kImageBytes;
    auto r = volume::FormatVolume({img_}, fo);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  void TearDown() override { Unmount(); }

  static volume::VolumeOptions VolumeOpts() {
    volume::VolumeOptions o;
    o.engine.rings = 2;
    o.engine.staging_pool_bytes = 16 << 20;
    o.index_cache_bytes = 8 << 20;
    return o;
  }

  // Opens the volume and a FileSystem over it (a mount without FUSE).
  void Mount() {
    auto v = volume::Volume::Open({img_}, VolumeOpts());
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    vol_ = std::move(v).value();
    fs::FileSystemOptions fo;
    fo.cache_bytes = 8 << 20;
    // fsck tests read files only to compare bytes; background prefetch
    // reads still in flight at unmount would only add shutdown races that
    // are fs/'s to test.
    fo.prefetch = fs::PrefetchMode::kOff;
    auto f = fs::FileSystem::Create(*vol_, fo);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fs_ = std::move(f).value();
  }
  void Unmount() {
    if (fs_) {
      EXPECT_TRUE(fs_->Shutdown().ok());
    }
    fs_.reset();
    vol_.reset();
  }

  uint64_t MkDir(uint64_t parent, const std::string& name) {
    auto a = fs_->MkDir(parent, name, 0755, fs::Caller{});
    EXPECT_TRUE(a.ok()) << name << ": " << a.status().ToString();
    return a.ok() ? a->ino : 0;
  }
  // Creates `name` with `data` and closes it; returns its inode.
  uint64_t Store(uint64_t parent, const std::string& name, const std::string& data) {
    auto c = fs_->Create(parent, name, 0644, O_WRONLY | O_CREAT, fs::Caller{});
    EXPECT_TRUE(c.ok()) << name << ": " << c.status().ToString();
    if (!c.ok()) return 0;
    if (!data.empty()) {
      auto w = fs_->Write(c->fh, 0, data);
      EXPECT_TRUE(w.ok()) << w.status().ToString();
    }
    EXPECT_TRUE(fs_->Flush(c->fh).ok());
    fs_->Release(c->fh);
    return c->attr.ino;
  }

  // The standard tree, written through fs/ and shut down cleanly:
  //   /a/ (dir)   /a/b/ (dir)   /a/b/k1 (3 MiB + 100 bytes)   /a/k2 (5000 B)
  //   /c/ (dir, renamed from /a/b/c)   /k3 (1 MiB)   /empty (0 bytes)
  void Populate() {
    Mount();
    a_ = MkDir(kRootIno, "a");
    b_ = MkDir(a_, "b");
    k1_data_ = Pattern((3 << 20) + 100, 1);
    k1_ = Store(b_, "k1", k1_data_);
    k2_ = Store(a_, "k2", Pattern(5000, 2));
    c_ = MkDir(b_, "c");
    ASSERT_TRUE(fs_->Rename(b_, "c", kRootIno, "c", 0).ok());
    k3_ = Store(kRootIno, "k3", Pattern(1 << 20, 3));
    Store(kRootIno, "empty", "");
    Store(c_, "gone", Pattern(10000, 4));
    ASSERT_TRUE(fs_->Unlink(c_, "gone").ok());
    Unmount();
  }

  // Reads a file through a fresh mount. Leaves the volume unmounted.
  Result<std::string> ReadPath(const std::vector<std::string>& path) {
    Mount();
    uint64_t ino = kRootIno;
    fs::Attr a;
    for (const auto& name : path) {
      auto r = fs_->Lookup(ino, name);
      if (!r.ok()) {
        Unmount();
        return r.status();
      }
      a = *r;
      ino = a.ino;
    }
    auto fh = fs_->Open(ino, O_RDONLY);
    if (!fh.ok()) {
      Unmount();
      return fh.status();
    }
    std::promise<Result<std::string>> p;
    fs_->Read(*fh, 0, a.size + 4096, [&](Status st, std::span<const char> d) {
      if (st.ok()) p.set_value(std::string(d.data(), d.size()));
      else p.set_value(st);
    });
    auto r = p.get_future().get();
    fs_->Release(*fh);
    Unmount();
    return r;
  }

  // The index opened read-write for planting damage. Close it (reset)
  // before checking.
  std::unique_ptr<index::Index> OpenIndex() {
    auto i = index::Index::Open(img_ + ".index", index::Index::Options{});
    EXPECT_TRUE(i.ok()) << i.status().ToString();
    return i.ok() ? std::move(i).value() : nullptr;
  }
  index::Inode GetInode(uint64_t ino) {
    auto idx = OpenIndex();
    auto r = idx->GetInode(ino);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : index::Inode{};
  }
  void PutInode(const index::Inode& in) {
    auto idx = OpenIndex();
    auto b = idx->NewBatch();
    b.PutInode(in);
    ASSERT_TRUE(idx->Commit(b, true).ok());
  }

  // Flips one byte of the image at `byte_off` (O_DIRECT, a block at a time).
  void FlipByte(uint64_t byte_off) { kvfs::testing::FlipByte(img_, byte_off); }

  Report Run(bool repair, bool verify = false) {
    CheckOptions o;
    o.devices = {img_};
    o.repair = repair;
    o.verify_data = verify;
    o.verify.inflight_reads = 4;
    o.verify.read_bytes = 2 << 20;
    o.index_cache_bytes = 8 << 20;
    return Check(o);
  }

  static std::vector<const Finding*> Of(const Report& r, FindingKind k) {
    std::vector<const Finding*> v;
    for (const Finding& f : r.findings) {
      if (f.kind == k) v.push_back(&f);
    }
    return v;
  }
  static std::string Lines(const Report& r) {
    std::string s = r.error.ok() ? "" : "error: " + r.error.ToString() + "\n";
    for (const Finding& f : r.findings) s += f.ToLine() + "\n";
    return s;
  }

  // -n finds exactly `kind` (among others allowed by `also`) with exit 4;
  // -y repairs with exit 1; a second -n (and -n --verify-data) is clean.
  void ExpectRepaired(FindingKind kind, bool verify = false) {
    Report n = Run(false, verify);
    EXPECT_EQ(n.ExitCode(), kExitUncorrected) << Lines(n);
    EXPECT_FALSE(Of(n, kind).empty()) << Lines(n);
    Report y = Run(true, verify);
    EXPECT_EQ(y.ExitCode(), kExitCorrected) << Lines(y);
    EXPECT_FALSE(Of(y, kind).empty()) << Lines(y);
    for (const Finding& f : y.findings) EXPECT_TRUE(f.repaired) << f.ToLine();
    Report again = Run(false, true);
    EXPECT_EQ(again.ExitCode(), kExitClean) << Lines(again);
    EXPECT_TRUE(again.findings.empty()) << Lines(again);
  }

  kvfs::testing::TempDir dir_;
  std::string img_;
  std::unique_ptr<volume::Volume> vol_;
  std::unique_ptr<fs::FileSystem> fs_;
  uint64_t a_ = 0, b_ = 0, c_ = 0, k1_ = 0, k2_ = 0, k3_ = 0;
  std::string k1_data_;
};

}  // namespace kvfs::fsck
