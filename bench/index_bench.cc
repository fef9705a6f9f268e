// kvfs-index-bench: point lookups (hits and misses) and the full inode scan
// of mount, on an index of N files (default 1,000,000) in a scratch
// directory under /var/tmp, after a reopen (cold block cache, data in SST
// files as after a restart).
//
//   kvfs-index-bench [--files N] [--lookups M] [--dirs D] [--keep]
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include "common/format.h"
#include "index/index.h"

namespace {

using Clock = std::chrono::steady_clock;
using kvfs::index::Index;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

[[noreturn]] void Die(const std::string& what, const kvfs::Status& st) {
  std::fprintf(stderr, "kvfs-index-bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

std::string Name(uint64_t i) {
  char b[32];
  std::snprintf(b, sizeof b, "chunk-%010llu.bin", static_cast<unsigned long long>(i));
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t files = 1000000, lookups = 1000000, dirs = 64;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> uint64_t {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kvfs-index-bench: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return std::strtoull(argv[++i], nullptr, 10);
    };
    if (!std::strcmp(argv[i], "--files")) {
      files = next();
    } else if (!std::strcmp(argv[i], "--lookups")) {
      lookups = next();
    } else if (!std::strcmp(argv[i], "--dirs")) {
      dirs = next();
    } else if (!std::strcmp(argv[i], "--keep")) {
      keep = true;
    } else {
      std::fprintf(stderr,
                   "usage: kvfs-index-bench [--files N] [--lookups M] [--dirs D] [--keep]\n");
      return 2;
    }
  }
  if (dirs == 0 || files == 0) return 2;

  char tmpl[] = "/var/tmp/kvfs-index-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = std::string(tmpl) + "/index";
  std::printf("index in %s: %llu files in %llu directories, 1 extent each\n", dir.c_str(),
              static_cast<unsigned long long>(files), static_cast<unsigned long long>(dirs));

  kvfs::index::VolumeRecord vol;
  vol.format_version = kvfs::kFormatVersion;
  vol.volume_uuid = kvfs::Uuid::Random();
  vol.index_uuid = kvfs::Uuid::Random();
  vol.device_count = 1;

  // Directory d is inode 2 + d; file i lives in directory i % dirs.
  {
    auto idx = Index::Create(dir, vol, 0, 0);
    if (!idx.ok()) Die("create", idx.status());
    auto t0 = Clock::now();
    kvfs::index::WriteBatch b = (*idx)->NewBatch();
    for (uint64_t d = 0; d < dirs; ++d) {
      kvfs::index::Inode n;
      n.ino = (*idx)->AllocateIno();
      n.mode = S_IFDIR | 0755;
      n.nlink = 2;
      b.PutInode(n);
      b.PutEntry(kvfs::kRootIno, "dir" + std::to_string(d), n.ino);
    }
    for (uint64_t i = 0; i < files; ++i) {
      kvfs::index::Inode n;
      n.ino = (*idx)->AllocateIno();
      n.mode = S_IFREG | 0644;
      n.nlink = 1;
      n.size = 256 << 10;
      n.extents.push_back({0, {0, kvfs::kDataStart + i * (256 << 10), 256 << 10}, 0x12345678});
      b.PutInode(n);
      b.PutEntry(2 + i % dirs, Name(i), n.ino);
      if (b.count() >= 2000) {
        if (auto st = (*idx)->Commit(b, false); !st.ok()) Die("commit", st);
      }
    }
    if (auto st = (*idx)->Commit(b, true); !st.ok()) Die("commit", st);
    const double load = Seconds(t0);
    std::printf("load:            %8.2f s  (%.0f files/s, batches of 1000 files, unsynced)\n",
                load, files / load);
    t0 = Clock::now();
    rocksdb::DB* db = (*idx)->db();
    for (const char* cf : {"default", kvfs::index::kInodesCf, kvfs::index::kEntriesCf}) {
      rocksdb::CompactRangeOptions co;
      auto s = db->CompactRange(co, (*idx)->handle(cf), nullptr, nullptr);
      if (!s.ok()) Die("compact", kvfs::Status::Error(EIO, s.ToString()));
    }
    std::printf("flush+compact:   %8.2f s\n", Seconds(t0));
  }

  Index::Options opt;
  auto t0 = Clock::now();
  auto opened = Index::Open(dir, opt);
  if (!opened.ok()) Die("open", opened.status());
  std::unique_ptr<Index> idx = std::move(opened).value();
  std::printf("reopen:          %8.3f s\n", Seconds(t0));

  std::mt19937_64 rng(1);
  // Warm-up-free numbers: the first pass runs on a cold block cache.
  for (int pass = 0; pass < 2; ++pass) {
    t0 = Clock::now();
    uint64_t found = 0;
    for (uint64_t k = 0; k < lookups; ++k) {
      const uint64_t i = rng() % files;
      auto r = idx->LookupEntry(2 + i % dirs, Name(i));
      if (r.ok()) ++found;
    }
    double s = Seconds(t0);
    std::printf("lookup hits:     %8.0f /s  (%s cache, %llu/%llu found)\n", lookups / s,
                pass ? "warm" : "cold", static_cast<unsigned long long>(found),
                static_cast<unsigned long long>(lookups));
    t0 = Clock::now();
    uint64_t missed = 0;
    for (uint64_t k = 0; k < lookups; ++k) {
      const uint64_t i = rng() % files;
      auto r = idx->LookupEntry(2 + i % dirs, Name(i + files));  // never present
      if (r.status().code() == ENOENT) ++missed;
    }
    s = Seconds(t0);
    std::printf("lookup misses:   %8.0f /s  (%llu/%llu ENOENT)\n", lookups / s,
                static_cast<unsigned long long>(missed), static_cast<unsigned long long>(lookups));
  }
  t0 = Clock::now();
  uint64_t got = 0;
  for (uint64_t k = 0; k < lookups / 4; ++k) {
    auto r = idx->GetInode(2 + dirs + rng() % files);
    if (r.ok()) ++got;
  }
  std::printf("GetInode hits:   %8.0f /s\n", (lookups / 4) / Seconds(t0));

  for (int pass = 0; pass < 2; ++pass) {
    t0 = Clock::now();
    uint64_t inodes = 0, extents = 0, bytes = 0;
    auto st = idx->ForEachInode([&](const kvfs::index::Inode& n) {
      ++inodes;
      for (const auto& e : n.extents) {
        ++extents;
        bytes += e.ext.len;
      }
      return true;
    });
    if (!st.ok()) Die("scan", st);
    std::printf("ForEachInode:    %8.3f s  (%llu inodes, %llu extents%s)\n", Seconds(t0),
                static_cast<unsigned long long>(inodes), static_cast<unsigned long long>(extents),
                pass ? ", page cache warm" : "");
  }
  t0 = Clock::now();
  uint64_t listed = 0;
  auto st = idx->ListEntries(2, "", [&](std::string_view, uint64_t) { return ++listed, true; });
  if (!st.ok()) Die("list", st);
  std::printf("ListEntries:     %8.3f s  (%llu names in one directory)\n", Seconds(t0),
              static_cast<unsigned long long>(listed));

  idx.reset();
  uintmax_t du = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) du += e.file_size();
  }
  std::printf("index size:      %8.1f MiB\n", du / 1048576.0);
  if (!keep) std::filesystem::remove_all(tmpl);
  return 0;
}
