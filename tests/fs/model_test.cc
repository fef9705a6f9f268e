// The filesystem against a reference model: seeded random sequences of
// create, open, write at random offsets and sizes, truncate, rename (over
// existing names too), unlink (also while open), fsync, close and remount,
// each checked against a plain map of names to bytes. A failure prints the
// seed and step; KVFS_MODEL_SEED=<n> reruns one seed. ServedModelTest runs
// the same with file memory on: opens served from it (the kernel's reads
// and writes on the memory), cache drops, memory dropped for room and
// reused, the batch calls (WriteFile, ReadFile), and eviction (-o
// evict=lru passes, as kvfsctl evict runs them): the files it unlinks are
// the ones the listener names, none of them open or with data in flight,
// and the model loses exactly those names.
#include <cstdlib>
#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <memory>
#include <mutex>
#include <set>

#include <unistd.h>

#include <future>

#include "common/format.h"
#include "device/fault_injecting_io.h"
#include "fs/file_memory.h"
#include "fs/stats.h"
#include "fs_fixture.h"

namespace kvfs::fs {
namespace {

constexpr uint64_t kChunkBytes = 1 << 20;  // fs/'s chunk: writes cross it

class ModelTest : public FsTest {
 protected:
  using Bytes = std::shared_ptr<std::string>;
  struct OpenFile {
    uint64_t fh;
    Bytes bytes;  // the file it is open on, named or not
    // Served: the kernel reads and writes this memory, not fs/.
    std::shared_ptr<FileMemory> memory;
    bool writable = true;
  };

  // Opening an existing file read-write, as the front end does.
  virtual OpenFile OpenExisting(uint64_t ino, const Bytes& bytes) {
    auto fh = fs_->Open(ino, O_RDWR);
    EXPECT_TRUE(fh.ok()) << fh.status().ToString();
    return {fh.ok() ? *fh : 0, bytes, nullptr};
  }
  // After each remount of the run: a new FileSystem.
  virtual void Mounted() {}
  // A step of the derived tests' own; false if it did nothing. `open`:
  // the handles open now (read only).
  virtual bool ExtraStep(std::mt19937_64&, std::map<std::string, Bytes>*,
                         const std::vector<OpenFile>&, const std::string&) {
    return false;
  }

  Status WriteThrough(const OpenFile& o, uint64_t off, const std::string& data) {
    if (o.memory) {  // the kernel writes a served open's bytes into the memory
      const ssize_t n = pwrite(o.memory->fd(), data.data(), data.size(), static_cast<off_t>(off));
      return n == static_cast<ssize_t>(data.size()) ? Status::OK() : Status::Error(EIO, "pwrite");
    }
    auto w = fs_->Write(o.fh, off, data);
    if (!w.ok()) return w.status();
    return *w == data.size() ? Status::OK() : Status::Error(EIO, "short write");
  }

  Result<std::string> ReadThrough(const OpenFile& o, size_t len) {
    if (o.memory) {
      std::string out(len, '\0');
      const ssize_t n = pread(o.memory->fd(), out.data(), len, 0);
      if (n < 0) return Status::Error(errno, "pread");
      out.resize(static_cast<size_t>(n));
      return out;
    }
    return ReadFh(o.fh, 0, len);
  }

  std::string Name(std::mt19937_64& rng) { return "n" + std::to_string(rng() % 8); }

  void CheckHandle(const OpenFile& o, const std::string& where) {
    auto got = ReadThrough(o, o.bytes->size() + 8192);
    ASSERT_TRUE(got.ok()) << where << ": " << got.status().ToString();
    ASSERT_EQ(got->size(), o.bytes->size()) << where;
    ASSERT_TRUE(*got == *o.bytes) << where << ": contents differ";
  }

  void CheckNames(const std::map<std::string, Bytes>& names, const std::string& where) {
    std::set<std::string> listed;
    auto dh = fs_->OpenDir(kRootIno);
    ASSERT_TRUE(dh.ok());
    ASSERT_TRUE(fs_->ReadDir(*dh, 0, [&](std::string_view n, uint64_t, uint32_t, uint64_t) {
                      if (n != "." && n != "..") listed.insert(std::string(n));
                      return true;
                    }).ok());
    fs_->ReleaseDir(*dh);
    std::set<std::string> want;
    for (const auto& [n, b] : names) want.insert(n);
    ASSERT_EQ(listed, want) << where;
    for (const auto& [n, b] : names) {
      auto got = Load(kRootIno, n);
      ASSERT_TRUE(got.ok()) << where << " " << n << ": " << got.status().ToString();
      ASSERT_EQ(got->size(), b->size()) << where << " " << n;
      ASSERT_TRUE(*got == *b) << where << " " << n << ": contents differ";
    }
  }

  void Run(uint64_t seed, int steps) {
    std::mt19937_64 rng(seed);
    std::map<std::string, Bytes> names;
    for (int k = 0; k < 8; ++k) {  // an empty root: what an earlier seed left goes
      Status st = fs_->Unlink(kRootIno, "n" + std::to_string(k));
      ASSERT_TRUE(st.ok() || st.code() == ENOENT) << st.ToString();
    }
    std::vector<OpenFile> open;
    auto close_all = [&] {
      for (const OpenFile& o : open) {
        EXPECT_TRUE(fs_->Flush(o.fh).ok());
        fs_->Release(o.fh);
      }
      open.clear();
    };
    for (int step = 0; step < steps; ++step) {
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      SCOPED_TRACE(where);
      const unsigned op = rng() % 100;
      const std::string name = Name(rng);
      auto it = names.find(name);
      if (op < 12) {  // create, or open an existing name
        if (it == names.end()) {
          auto c = fs_->Create(kRootIno, name, 0644, O_RDWR | O_CREAT, Caller{});
          ASSERT_TRUE(c.ok()) << c.status().ToString();
          auto b = std::make_shared<std::string>();
          names[name] = b;
          open.push_back({c->fh, b, nullptr});
        } else if (open.size() < 6) {
          auto a = fs_->Lookup(kRootIno, name);
          ASSERT_TRUE(a.ok());
          OpenFile o = OpenExisting(a->ino, it->second);
          if (HasFatalFailure() || o.fh == 0) return;
          open.push_back(o);
        }
      } else if (op < 45 && !open.empty()) {  // write at a random offset
        OpenFile& o = open[rng() % open.size()];
        if (!o.writable) continue;
        const uint64_t off = rng() % (3 * kChunkBytes);
        const size_t len = 1 + rng() % (rng() % 4 == 0 ? 2 * kChunkBytes : 64 << 10);
        const std::string data = Pattern(len, static_cast<uint32_t>(rng()));
        Status w = WriteThrough(o, off, data);
        ASSERT_TRUE(w.ok()) << w.ToString();
        if (o.bytes->size() < off + len) o.bytes->resize(off + len, '\0');
        o.bytes->replace(off, len, data);
      } else if (op < 55 && it != names.end()) {  // truncate
        const uint64_t size = rng() % (2 * kChunkBytes + 100);
        auto a = fs_->Lookup(kRootIno, name);
        ASSERT_TRUE(a.ok());
        SetAttrRequest req;
        req.size = size;
        ASSERT_TRUE(fs_->SetAttr(a->ino, req).ok());
        it->second->resize(size, '\0');
      } else if (op < 65 && it != names.end()) {  // rename, maybe over another name
        const std::string to = Name(rng);
        ASSERT_TRUE(fs_->Rename(kRootIno, name, kRootIno, to, 0).ok());
        Bytes b = it->second;
        names.erase(it);
        names[to] = b;
      } else if (op < 73 && it != names.end()) {  // unlink, also while open
        ASSERT_TRUE(fs_->Unlink(kRootIno, name).ok());
        names.erase(it);
      } else if (op < 80 && !open.empty()) {  // fsync
        ASSERT_TRUE(FsyncFh(open[rng() % open.size()].fh).ok());
      } else if (op < 88 && !open.empty()) {  // close
        const size_t k = rng() % open.size();
        ASSERT_TRUE(fs_->Flush(open[k].fh).ok());
        fs_->Release(open[k].fh);
        open.erase(open.begin() + k);
      } else if (op < 96 && !open.empty()) {  // read back through a handle
        CheckHandle(open[rng() % open.size()], where);
      } else if (op < 98 && ExtraStep(rng, &names, open, where)) {
      } else if (op >= 98) {  // remount: what was closed is what comes back
        close_all();
        Remount();
        Mounted();
        CheckNames(names, where + " after remount");
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (const OpenFile& o : open) CheckHandle(o, "end of seed " + std::to_string(seed));
    close_all();
    CheckNames(names, "end of seed " + std::to_string(seed));
    Remount();
    Mounted();
    CheckNames(names, "end of seed " + std::to_string(seed) + " after remount");
    EXPECT_EQ(fs_->FlushAll().code(), 0);
  }
};

TEST_F(ModelTest, RandomSequencesMatchTheReferenceModel) {
  if (const char* s = std::getenv("KVFS_MODEL_SEED")) return Run(std::strtoull(s, nullptr, 10), 4000);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Run(seed, 1500);
    if (HasFatalFailure()) return;
  }
}

class ServedModelTest : public ModelTest {
 protected:
  FileSystemOptions FsOpts() override {
    FileSystemOptions o;
    o.file_memory = true;
    o.cache_bytes = 16 << 20;  // 12 MiB of file memory: files are evicted, memory reused
    o.eviction.enabled = true;
    o.eviction.high_pct = 100;  // passes only when the step asks (or a full volume)
    o.eviction.low_pct = 99;
    o.eviction.min_age_ns = 0;
    return o;
  }

  void SetUp() override {
    ModelTest::SetUp();
    Mounted();
  }
  // The names eviction unlinked, as the front end is told of them.
  void Mounted() override {
    fs_->SetEvictionListener([this](uint64_t parent, std::string_view name, uint64_t) {
      std::lock_guard<std::mutex> l(evicted_mu_);
      if (parent == kRootIno) evicted_.emplace_back(name);
    });
  }
  std::vector<std::string> TakeEvicted(size_t want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      {
        std::lock_guard<std::mutex> l(evicted_mu_);
        if (evicted_.size() >= want || std::chrono::steady_clock::now() > deadline) {
          std::vector<std::string> out;
          out.swap(evicted_);
          return out;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  OpenFile OpenExisting(uint64_t ino, const Bytes& bytes) override {
    // Read-only opens are served when nothing else is open; while one is,
    // every open of the file is, writers too (the kernel's rule).
    const int flags = rng_() % 2 ? O_RDONLY : O_RDWR;
    std::promise<Result<FileSystem::Opened>> p;
    fs_->OpenServed(
        ino, flags, nullptr, [](FileMemory&) { return true; },
        [&](Result<FileSystem::Opened> r) { p.set_value(std::move(r)); });
    Result<FileSystem::Opened> r = p.get_future().get();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {0, bytes, nullptr};
    if (r->memory) served_++;
    return {r->fh, bytes, r->memory, flags == O_RDWR};
  }

  bool ExtraStep(std::mt19937_64& rng, std::map<std::string, Bytes>* names,
                 const std::vector<OpenFile>& open, const std::string& where) override {
    const std::string name = Name(rng);
    reused_ = std::max<uint64_t>(reused_, fs_->Stats().file_memory.reused);
    switch (rng() % 4) {
      case 3: {  // an eviction pass: down to half the space used, or all it may
        const FsStats sf = fs_->StatFs();
        const uint64_t used_pct =
            100 * (sf.total_blocks - sf.free_blocks) / std::max<uint64_t>(sf.total_blocks, 1);
        Result<uint64_t> n = fs_->Evict(rng() % 2 ? 0 : static_cast<unsigned>(used_pct / 2));
        EXPECT_TRUE(n.ok()) << where << ": " << n.status().ToString();
        if (!n.ok()) return true;
        const std::vector<std::string> gone = TakeEvicted(*n);
        EXPECT_EQ(gone.size(), *n) << where;
        for (const std::string& g : gone) {
          auto it = names->find(g);
          EXPECT_NE(it, names->end()) << where << ": evicted " << g << ", which is not a name";
          if (it == names->end()) continue;
          for (const OpenFile& o : open) {
            EXPECT_NE(o.bytes, it->second) << where << ": evicted " << g << ", which is open";
          }
          names->erase(it);
          evictions_++;
        }
        return true;
      }
      case 0:  // .kvfs/drop_cache (memory that serves opens stays)
        EXPECT_TRUE(fs_->DropCache().ok()) << where;
        return true;
      case 1: {  // the batch WRITE: the name replaced whole
        // Keys come in a few sizes: dropped memory is then reused.
        static constexpr uint64_t kSizes[] = {256 << 10, 1 << 20, (2 << 20) + 4096};
        auto data = std::make_shared<std::string>(
            Pattern(kSizes[rng() % 3], static_cast<uint32_t>(rng())));
        std::promise<Status> p;
        fs_->WriteFile(kRootIno, name, *data, Caller{}, [&](Status st) { p.set_value(st); });
        Status st = p.get_future().get();
        EXPECT_TRUE(st.ok()) << where << ": " << st.ToString();
        (*names)[name] = data;
        return true;
      }
      default: {  // the batch READ of a name, checked
        auto it = names->find(name);
        if (it == names->end()) return false;
        std::string dest(it->second->size() + 4096, '\0');
        std::promise<Result<size_t>> p;
        fs_->ReadFile(kRootIno, name, 0, std::span<char>(dest.data(), dest.size()), Caller{},
                      [&](Result<size_t> r) { p.set_value(std::move(r)); });
        Result<size_t> r = p.get_future().get();
        EXPECT_TRUE(r.ok()) << where << ": " << r.status().ToString();
        if (r.ok()) {
          EXPECT_EQ(*r, it->second->size()) << where;
          EXPECT_TRUE(dest.substr(0, *r) == *it->second) << where << " " << name << ": differs";
        }
        return true;
      }
    }
  }

  int served_ = 0;
  uint64_t reused_ = 0;  // the most seen in one mount
  int evictions_ = 0;
  std::mutex evicted_mu_;
  std::vector<std::string> evicted_;
  std::mt19937_64 rng_{5};
};

TEST_F(ServedModelTest, ServedOpensBatchCallsDropsAndEvictionMatchTheReferenceModel) {
  if (const char* s = std::getenv("KVFS_MODEL_SEED")) return Run(std::strtoull(s, nullptr, 10), 4000);
  for (uint64_t seed = 11; seed <= 13; ++seed) {
    Run(seed, 1500);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(served_, 0);
  EXPECT_GT(reused_, 0u);
  EXPECT_GT(evictions_, 0);
  const FileMemoryCounters c = fs_->Stats().file_memory;
  EXPECT_LE(c.bytes + c.kept_bytes, c.budget_bytes);
}


// The same kind of sequence (keys stored as a connector does: temp file,
// write, close, rename over the key; unlinks; syncs) through the power-cut
// device wrapper, cut at a random step: after a remount the keys are
// exactly those of one moment of the run, no earlier than the last sync
// that returned, each with the whole content it had then.
class PowerCutModelTest : public ModelTest {
 protected:
  volume::VolumeOptions VolumeOpts() override {
    volume::VolumeOptions o = FsTest::VolumeOpts();
    if (cut_mode_) {
      o.wrap_io = [this](device::BlockIo& inner) {
        auto w = std::make_unique<device::FaultInjectingIo>(inner);
        w->EnablePowerCutMode();
        io_ = w.get();
        return w;
      };
    }
    return o;
  }
  bool cut_mode_ = false;
  device::FaultInjectingIo* io_ = nullptr;
};

TEST_F(PowerCutModelTest, WhatSurvivesACutIsAPrefixOfWhatHappened) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed * 7919);
    cut_mode_ = true;
    Remount();
    for (int k = 0; k < 8; ++k) fs_->Unlink(kRootIno, "k" + std::to_string(k)).ignore();
    ASSERT_TRUE(fs_->Sync().ok());
    std::map<std::string, std::string> keys;
    std::vector<std::map<std::string, std::string>> history{keys};
    size_t synced = 0;  // history[synced] or later must survive
    const int steps = 20 + static_cast<int>(rng() % 60);
    for (int step = 0; step < steps; ++step) {
      const std::string key = "k" + std::to_string(rng() % 8);
      const unsigned op = rng() % 10;
      if (op < 6) {
        const std::string data = Pattern(1 + rng() % (3 << 20), static_cast<uint32_t>(rng()));
        const std::string tmp = key + ".tmp" + std::to_string(step);
        Store(kRootIno, tmp, data);
        ASSERT_TRUE(fs_->Rename(kRootIno, tmp, kRootIno, key, 0).ok());
        keys[key] = data;
      } else if (op < 8) {
        if (!keys.count(key)) continue;
        ASSERT_TRUE(fs_->Unlink(kRootIno, key).ok());
        keys.erase(key);
      } else {
        ASSERT_TRUE(fs_->Sync().ok());
        synced = history.size() - 1;
        continue;
      }
      history.push_back(keys);
    }
    io_->PowerCut();
    fs_.reset();  // its writes and commits fail from here on
    vol_.reset();
    cut_mode_ = false;
    io_ = nullptr;
    Mount();
    std::map<std::string, std::string> got;
    auto dh = fs_->OpenDir(kRootIno);
    ASSERT_TRUE(dh.ok());
    std::vector<std::string> listed;
    ASSERT_TRUE(fs_->ReadDir(*dh, 0, [&](std::string_view n, uint64_t, uint32_t, uint64_t) {
                      listed.emplace_back(n);
                      return true;
                    }).ok());
    fs_->ReleaseDir(*dh);
    for (const std::string& n : listed) {
      if (n.size() != 2 || n[0] != 'k') continue;  // ".", "..", temp names
      auto data = Load(kRootIno, n);
      ASSERT_TRUE(data.ok()) << n << ": " << data.status().ToString();
      got[n] = std::move(data).value();
    }
    bool found = false;
    for (size_t k = synced; k < history.size() && !found; ++k) found = history[k] == got;
    EXPECT_TRUE(found) << "the keys after the cut (" << got.size()
                       << ") are no state of the run since the last sync (" << synced << " of "
                       << history.size() << ")";
    if (HasFailure()) return;
  }
}


// A truncate that cuts inside a chunk writes the chunk's head before the cut
// takes effect; its record reaches the index after that write. Cut then,
// the file is its old self or its new one: never the new size over zeros
// (the old extent dropped before the new head was written), nor a prefix
// of the old file that was never one of its versions.
TEST_F(PowerCutModelTest, ACutAfterATruncateKeepsTheOldOrTheNewBytes) {
  for (const uint64_t cut_at : {uint64_t{48} << 10, uint64_t{49278}, uint64_t{1} << 20 | 4096}) {
    SCOPED_TRACE("truncate to " + std::to_string(cut_at));
    cut_mode_ = true;
    Remount();
    fs_->Unlink(kRootIno, "k").ignore();
    const std::string data = Pattern(cut_at < (1 << 20) ? 64 << 10 : 3 << 20, 11);
    const uint64_t ino = Store(kRootIno, "k", data);
    ASSERT_TRUE(fs_->Sync().ok());
    SetAttrRequest t;
    t.size = cut_at;
    ASSERT_TRUE(fs_->SetAttr(ino, t).ok());
    // The truncate's record committed.
    for (int tries = 0; fs_->Stats().queued_commits > 0 && tries < 5000; ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(fs_->Stats().queued_commits, 0u);
    io_->PowerCut();
    fs_.reset();
    vol_.reset();
    cut_mode_ = false;
    io_ = nullptr;
    Mount();
    auto got = Load(kRootIno, "k");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const bool old_file = *got == data;
    const bool new_file = *got == data.substr(0, cut_at);
    EXPECT_TRUE(old_file || new_file)
        << got->size() << " bytes, first differing byte at "
        << std::mismatch(got->begin(), got->end(), data.begin()).first - got->begin();
  }
}

}  // namespace
}  // namespace kvfs::fs
