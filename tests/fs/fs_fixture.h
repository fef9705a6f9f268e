// A FileSystem over a real image file and RocksDB index, driven in-process,
// with helpers that wait for the asynchronous calls.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <future>
#include <random>
#include <string>

#include "common/format.h"
#include "fs/file_system.h"
#include "util/pattern.h"
#include "util/temp_dir.h"
#include "util/write_gate_io.h"
#include "volume/format_volume.h"
#include "volume/volume.h"

namespace kvfs::fs {

using kvfs::testing::Pattern;

class FsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    img_ = dir_.Join("vol.img");
    volume::FormatOptions fo;
    fo.size_bytes = image_bytes_;
    auto r = volume::FormatVolume({img_}, fo);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Mount();
  }
  void TearDown() override { Unmount(); }

  virtual volume::VolumeOptions VolumeOpts() {
    volume::VolumeOptions o;
    o.engine.rings = 2;
    o.engine.staging_pool_bytes = 64 << 20;
    return o;
  }

  virtual FileSystemOptions FsOpts() { return FileSystemOptions{}; }

  void Mount() {
    auto v = volume::Volume::Open({img_}, VolumeOpts());
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    vol_ = std::move(v).value();
    auto f = FileSystem::Create(*vol_, FsOpts());
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
  void Remount() {
    Unmount();
    Mount();
  }

  // Creates `name` in `parent` with `data`, closes it. Returns the inode.
  uint64_t Store(uint64_t parent, const std::string& name, const std::string& data) {
    auto c = fs_->Create(parent, name, 0644, O_WRONLY | O_CREAT, Caller{});
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return 0;
    auto w = fs_->Write(c->fh, 0, data);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_TRUE(fs_->Flush(c->fh).ok());
    fs_->Release(c->fh);
    return c->attr.ino;
  }

  // Writes `name` in the root, 1 MiB at a time, until the volume is full
  // (a write fails or comes back short), and closes it.
  void FillVolume(const std::string& name) {
    auto c = fs_->Create(kRootIno, name, 0644, O_WRONLY, Caller{});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const std::string mib(1 << 20, 'f');
    for (uint64_t off = 0;; off += mib.size()) {
      auto w = fs_->Write(c->fh, off, mib);
      if (!w.ok() || *w < mib.size()) break;
    }
    fs_->Release(c->fh);
  }

  Result<std::string> ReadFh(uint64_t fh, uint64_t off, size_t len) {
    std::promise<Result<std::string>> p;
    fs_->Read(fh, off, len, [&](Status st, std::span<const char> d) {
      if (st.ok()) p.set_value(std::string(d.data(), d.size()));
      else p.set_value(st);
    });
    return p.get_future().get();
  }

  Result<std::string> Load(uint64_t parent, const std::string& name) {
    KVFS_ASSIGN_OR_RETURN(Attr a, fs_->Lookup(parent, name));
    KVFS_ASSIGN_OR_RETURN(uint64_t fh, fs_->Open(a.ino, O_RDONLY));
    auto r = ReadFh(fh, 0, a.size + 4096);
    fs_->Release(fh);
    return r;
  }

  Status FsyncFh(uint64_t fh) {
    std::promise<Status> p;
    fs_->Fsync(fh, false, [&](Status st) { p.set_value(st); });
    return p.get_future().get();
  }

  uint64_t image_bytes_ = 256 << 20;
  testing::TempDir dir_;
  std::string img_;
  std::unique_ptr<volume::Volume> vol_;
  std::unique_ptr<FileSystem> fs_;
};

// `Base` (FsTest or a fixture made from it) with the volume's device behind
// a WriteGateIo (tests/util/write_gate_io.h), so that a test holds data
// writes back and releases them when it chooses.
template <typename Base>
class WriteGated : public Base {
 protected:
  volume::VolumeOptions VolumeOpts() override {
    auto o = Base::VolumeOpts();
    o.wrap_io = [this](device::BlockIo& inner) {
      auto g = std::make_unique<testing::WriteGateIo>(inner);
      gate_ = g.get();
      return g;
    };
    return o;
  }
  testing::WriteGateIo* gate_ = nullptr;  // owned by the volume
};

}  // namespace kvfs::fs
