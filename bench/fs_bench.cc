// kvfs-fs-bench: the connector store/load loop driven in-process through
// fs::FileSystem (no FUSE), to separate the filesystem's own cost from the
// kernel round trips. Usage: kvfs-fs-bench IMAGE [size_bytes] [keys]
#include <fcntl.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "common/format.h"
#include "fs/file_system.h"
#include "volume/format_volume.h"
#include "volume/volume.h"

using namespace kvfs;
using Clock = std::chrono::steady_clock;

static double Secs(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s IMAGE [size_bytes] [keys]\n", argv[0]);
    return 16;
  }
  std::string img = argv[1];
  size_t size = argc > 2 ? std::stoull(argv[2]) : (4 << 20);
  int keys = argc > 3 ? std::stoi(argv[3]) : 64;
  volume::FormatOptions fo;
  fo.size_bytes = 8ull << 30;
  fo.force = true;
  auto fr = volume::FormatVolume({img}, fo);
  if (!fr.ok()) {
    std::fprintf(stderr, "%s\n", fr.status().ToString().c_str());
    return 1;
  }
  std::string data(size, 'x');
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 131 + 7);
  for (int round = 0; round < 2; ++round) {
    auto vol = volume::Volume::Open({img}, volume::VolumeOptions{});
    if (!vol.ok()) return 1;
    fs::FileSystemOptions fopt;
    fopt.prefetch = fs::PrefetchMode::kOff;
    auto f = fs::FileSystem::Create(**vol, fopt);
    if (!f.ok()) return 1;
    fs::FileSystem& fs = **f;
    if (round == 0) {
      auto t = Clock::now();
      for (int k = 0; k < keys; ++k) {
        std::string n = "k" + std::to_string(k);
        auto c = fs.Create(kRootIno, n + ".tmp", 0644, O_WRONLY, fs::Caller{});
        for (size_t off = 0; off < size; off += 1 << 20) {
          size_t len = std::min<size_t>(1 << 20, size - off);
          if (!fs.Write(c->fh, off, std::string_view(data).substr(off, len)).ok()) return 1;
        }
        if (!fs.Flush(c->fh).ok()) return 1;
        fs.Release(c->fh);
        if (!fs.Rename(kRootIno, n + ".tmp", kRootIno, n, 0).ok()) return 1;
      }
      double s = Secs(t);
      auto t2 = Clock::now();
      if (!fs.Shutdown().ok()) return 1;
      std::printf("store: %d x %zu KiB: %.0f MB/s (drain+sync %.3f s)\n", keys, size >> 10,
                  keys * double(size) / s / 1e6, Secs(t2));
    } else {
      auto t = Clock::now();
      for (int k = 0; k < keys; ++k) {
        auto a = fs.Lookup(kRootIno, "k" + std::to_string(k));
        auto fh = fs.Open(a->ino, O_RDONLY);
        // The kernel sends a large read as concurrent 1 MiB requests.
        std::vector<std::future<bool>> parts;
        std::vector<std::promise<bool>> ps(size / (1 << 20) + 1);
        size_t i = 0;
        for (size_t off = 0; off < size; off += 1 << 20, ++i) {
          parts.push_back(ps[i].get_future());
          fs.Read(*fh, off, 1 << 20, [&, i, off](Status st, std::span<const char> d) {
            ps[i].set_value(st.ok() && std::memcmp(d.data(), data.data() + off, d.size()) == 0);
          });
        }
        for (auto& p : parts)
          if (!p.get()) return 1;
        fs.Release(*fh);
      }
      std::printf("load:  %d x %zu KiB: %.0f MB/s\n", keys, size >> 10,
                  keys * double(size) / Secs(t) / 1e6);
      // Batch EXISTS's own cost: 10,000 names, every other one missing.
      constexpr int kNames = 10000;
      std::vector<std::string> names;
      for (int i = 0; i < kNames; ++i) {
        char n[64];
        std::snprintf(n, sizeof(n), "bench-model@8@e@%06d.data", i);
        names.emplace_back(n);
        if (i % 2 == 0) {
          auto c = fs.Create(kRootIno, n, 0644, O_WRONLY, fs::Caller{});
          if (!c.ok()) return 1;
          fs.Release(c->fh);
        }
      }
      for (int pass = 0; pass < 3; ++pass) {
        auto te = Clock::now();
        int found = 0;
        for (const std::string& n : names) found += fs.ExistsPath(kRootIno, n, fs::Caller{}).ok();
        if (found != kNames / 2) return 1;
        std::printf("exists: %d names (half missing): %.0f names/s\n", kNames,
                    kNames / Secs(te));
        auto ti = Clock::now();
        int in_index = 0;
        for (const std::string& n : names) in_index += (*vol)->index().LookupEntry(kRootIno, n).ok();
        std::printf("        index lookups alone: %.0f names/s (%d found)\n", kNames / Secs(ti),
                    in_index);
      }
    }
  }
  return 0;
}
