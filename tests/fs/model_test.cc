// The filesystem against a reference model: seeded random sequences of
// create, open, write at random offsets and sizes, truncate, rename (over
// existing names too), unlink (also while open), fsync, close and remount,
// each checked against a plain map of names to bytes. A failure prints the
// seed and step; KVFS_MODEL_SEED=<n> reruns one seed.
#include <cstdlib>
#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <memory>
#include <set>

#include "common/format.h"
#include "device/fault_injecting_io.h"
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
  };

  std::string Name(std::mt19937_64& rng) { return "n" + std::to_string(rng() % 8); }

  void CheckHandle(const OpenFile& o, const std::string& where) {
    auto got = ReadFh(o.fh, 0, o.bytes->size() + 8192);
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
          open.push_back({c->fh, b});
        } else if (open.size() < 6) {
          auto a = fs_->Lookup(kRootIno, name);
          ASSERT_TRUE(a.ok());
          auto fh = fs_->Open(a->ino, O_RDWR);
          ASSERT_TRUE(fh.ok()) << fh.status().ToString();
          open.push_back({*fh, it->second});
        }
      } else if (op < 45 && !open.empty()) {  // write at a random offset
        OpenFile& o = open[rng() % open.size()];
        const uint64_t off = rng() % (3 * kChunkBytes);
        const size_t len = 1 + rng() % (rng() % 4 == 0 ? 2 * kChunkBytes : 64 << 10);
        const std::string data = Pattern(len, static_cast<uint32_t>(rng()));
        auto w = fs_->Write(o.fh, off, data);
        ASSERT_TRUE(w.ok()) << w.status().ToString();
        ASSERT_EQ(*w, len);
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
      } else if (op >= 98) {  // remount: what was closed is what comes back
        close_all();
        Remount();
        CheckNames(names, where + " after remount");
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (const OpenFile& o : open) CheckHandle(o, "end of seed " + std::to_string(seed));
    close_all();
    CheckNames(names, "end of seed " + std::to_string(seed));
    Remount();
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


// A truncate that cuts inside a chunk stages the chunk's head and writes it
// later; its record reaches the index before (nothing waits for a record
// change). Cut then, the file is its old self or its new one, never the new
// size over zeros (the old extent dropped before the new head was written).
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
    // The truncate's record committed (its head chunk still staged).
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
    const bool prefix = got->size() >= cut_at && *got == data.substr(0, got->size());
    EXPECT_TRUE(old_file || new_file || prefix)
        << got->size() << " bytes, first differing byte at "
        << std::mismatch(got->begin(), got->end(), data.begin()).first - got->begin();
  }
}

}  // namespace
}  // namespace kvfs::fs
