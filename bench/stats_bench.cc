// kvfs-stats-bench: what counting statistics (fs/stats.h, common/histogram.h)
// costs on the hot path, next to the operations it is added to.
//
// Every counted fs/ call (Lookup, Read, Write, Prefetch, Fsync) pays two
// steady_clock::now() calls and one FsMetrics::Record (histogram bucket and
// sum adds, min/max compare, a bytes add). The benchmarks measure those
// alone, single-threaded and with threads contending on the same counters,
// and then the operations themselves on a real volume (an image file under
// /var/tmp, formatted here; real RocksDB and io_uring): an in-process
// FileSystem::Lookup and a 4 KiB read from the RAM cache -- the cheapest
// counted calls -- and, with --mount=DIR (a kvfs mount), a 4 KiB pread(2)
// through FUSE, as a connector makes it.
//
//   kvfs-stats-bench [--mount=DIR] [google benchmark flags]
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/format.h"
#include "common/histogram.h"
#include "fs/file_system.h"
#include "fs/stats.h"
#include "volume/format_volume.h"
#include "volume/volume.h"

namespace {

using namespace kvfs;

// Latencies spread over what fs/ records (0.5 us .. 10 ms, log-uniform), so
// records land in many buckets as they do in the daemon.
const std::vector<uint64_t>& SampleNs() {
  static const std::vector<uint64_t> v = [] {
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> e(std::log(500.0), std::log(1e7));
    std::vector<uint64_t> out(4096);
    for (auto& x : out) x = static_cast<uint64_t>(std::exp(e(rng)));
    return out;
  }();
  return v;
}

void BM_SteadyClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
}
BENCHMARK(BM_SteadyClockNow);

Histogram g_hist;
void BM_HistogramRecord(benchmark::State& state) {
  const auto& ns = SampleNs();
  size_t i = static_cast<size_t>(state.thread_index()) * 997;
  for (auto _ : state) g_hist.Record(ns[i++ & 4095]);
}
BENCHMARK(BM_HistogramRecord)->Threads(1)->Threads(2);

fs::FsMetrics g_metrics;
// Record alone (the latency given): what is added besides the clock reads.
void BM_FsMetricsRecord(benchmark::State& state) {
  const auto& ns = SampleNs();
  size_t i = static_cast<size_t>(state.thread_index()) * 997;
  for (auto _ : state) g_metrics.Record(fs::Op::kRead, ns[i++ & 4095], 4096);
}
BENCHMARK(BM_FsMetricsRecord)->Threads(1)->Threads(2);

// Everything one counted call adds, exactly as fs/ does it:
//   start = now(); ...op...; Record(op, ElapsedNs(start), bytes)
void BM_CountingPerCall(benchmark::State& state) {
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    g_metrics.Record(fs::Op::kRead, fs::ElapsedNs(start), 4096);
  }
}
BENCHMARK(BM_CountingPerCall)->Threads(1)->Threads(2);

// --- The operations counting is added to, on a real volume.
struct Volume {
  std::string dir;
  std::unique_ptr<volume::Volume> vol;
  std::unique_ptr<fs::FileSystem> fs;
  uint64_t fh = 0;
};
Volume* g_vol = nullptr;

bool SetUpVolume() {
  char tmpl[] = "/var/tmp/kvfs-stats-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return false;
  g_vol = new Volume;
  g_vol->dir = tmpl;
  const std::string img = g_vol->dir + "/kvfs.img";
  volume::FormatOptions fo;
  fo.size_bytes = 256ull << 20;
  fo.force = true;
  if (!volume::FormatVolume({img}, fo).ok()) return false;
  auto v = volume::Volume::Open({img}, volume::VolumeOptions{});
  if (!v.ok()) return false;
  g_vol->vol = std::move(*v);
  fs::FileSystemOptions fopt;
  fopt.prefetch = fs::PrefetchMode::kOff;
  auto f = fs::FileSystem::Create(*g_vol->vol, fopt);
  if (!f.ok()) return false;
  g_vol->fs = std::move(*f);
  fs::FileSystem& fs = *g_vol->fs;
  auto c = fs.Create(kRootIno, "f", 0644, O_RDWR, fs::Caller{});
  if (!c.ok()) return false;
  std::string data(1 << 20, 'x');
  if (!fs.Write(c->fh, 0, data).ok() || !fs.Flush(c->fh).ok()) return false;
  fs.Release(c->fh);
  if (!fs.Sync().ok()) return false;
  auto a = fs.Lookup(kRootIno, "f");
  if (!a.ok()) return false;
  auto fh = fs.Open(a->ino, O_RDONLY);
  if (!fh.ok()) return false;
  g_vol->fh = *fh;
  // Reads fill no cache; prefetch does. Load the file, then read it from RAM.
  if (!fs.Prefetch(a->ino).ok()) return false;
  for (int i = 0; fs.cache_stats().bytes < (1u << 20); ++i) {
    if (i == 1000) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void TearDownVolume() {
  if (g_vol == nullptr) return;
  if (g_vol->fs) {
    if (g_vol->fh) g_vol->fs->Release(g_vol->fh);
    g_vol->fs->Shutdown().ignore();  // a benchmark volume, removed below
  }
  g_vol->fs.reset();
  g_vol->vol.reset();
  std::error_code ec;
  std::filesystem::remove_all(g_vol->dir, ec);
  delete g_vol;
  g_vol = nullptr;
}

void BM_FsLookup(benchmark::State& state) {
  fs::FileSystem& fs = *g_vol->fs;
  for (auto _ : state) {
    auto a = fs.Lookup(kRootIno, "f");
    if (!a.ok()) state.SkipWithError("lookup failed");
    fs.Forget(a->ino, 1);
  }
}

// 4 KiB from the RAM cache (SetUpVolume prefetched the file); the callback
// runs on the calling thread or an engine thread: spin until it has.
void BM_FsCachedRead4K(benchmark::State& state) {
  fs::FileSystem& fs = *g_vol->fs;
  std::atomic<bool> done{false};
  bool ok = true;
  for (auto _ : state) {
    done.store(false, std::memory_order_relaxed);
    fs.Read(g_vol->fh, 8192, 4096, [&](Status st, std::span<const char> d) {
      ok = ok && st.ok() && d.size() == 4096;
      done.store(true, std::memory_order_release);
    });
    while (!done.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  if (!ok) state.SkipWithError("read failed");
}

// --- Through a kvfs mount (--mount=DIR): the calls a connector makes.
std::string g_mount;

void BM_MountPread4K(benchmark::State& state) {
  const std::string p = g_mount + "/.kvfs-stats-bench";
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) {
    state.SkipWithError("open failed");
    return;
  }
  char buf[4096];
  for (auto _ : state) {
    if (::pread(fd, buf, sizeof(buf), 8192) != 4096) state.SkipWithError("pread failed");
  }
  ::close(fd);
}

bool MakeMountFile() {
  const std::string p = g_mount + "/.kvfs-stats-bench";
  const int fd = ::open(p.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
  if (fd < 0) return false;
  std::string data(1 << 20, 'y');
  const bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  return ::close(fd) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--mount=", 8) == 0) {
      g_mount = argv[i] + 8;
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 16;
  if (!SetUpVolume()) {
    std::fprintf(stderr, "kvfs-stats-bench: cannot set up a volume under /var/tmp\n");
    TearDownVolume();
    return 1;
  }
  benchmark::RegisterBenchmark("BM_FsLookup", BM_FsLookup);
  benchmark::RegisterBenchmark("BM_FsCachedRead4K", BM_FsCachedRead4K);
  if (!g_mount.empty()) {
    if (!MakeMountFile()) {
      std::fprintf(stderr, "kvfs-stats-bench: cannot write a file in %s\n", g_mount.c_str());
      TearDownVolume();
      return 1;
    }
    benchmark::RegisterBenchmark("BM_MountPread4K", BM_MountPread4K);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!g_mount.empty()) ::unlink((g_mount + "/.kvfs-stats-bench").c_str());
  TearDownVolume();
  return 0;
}
