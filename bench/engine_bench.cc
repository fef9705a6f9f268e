// kvfs-engine-bench: drives the IoEngine on an image file at fixed queue
// depths and command sizes (random, bs-aligned offsets) and, when fio is on
// PATH, runs fio with the same parameters on the same file, printing the
// throughput of both and their ratio per point.
//
//   kvfs-engine-bench --file /var/tmp/bench.img [--size-gb 4] [--seconds 3] [--rings R]
//
// With the defaults (16 points, 3 s per side) a run takes about 2 minutes.
//
// The image is created (and written once end to end, so that later writes
// do not pay for allocating or converting unwritten extents) if it is
// missing or too small. Each point alternates engine and fio in several
// slices so that drift of the device affects both alike.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/format.h"
#include "device/block_device.h"
#include "device/io_engine.h"

namespace {

using kvfs::Status;
using kvfs::device::BlockDevice;
using kvfs::device::IoEngine;
using kvfs::device::IoEngineOptions;
using kvfs::device::IoOp;
using kvfs::device::IoRequest;
using kvfs::device::PoolBuffer;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = 1 << 20;

// Makes `path` at least `bytes` long with every block written once.
bool PrepareImage(const std::string& path, uint64_t bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) >= bytes) {
    std::printf("using existing %s (%.1f GiB)\n", path.c_str(), st.st_size / double(1 << 30));
    return true;
  }
  std::printf("writing %s (%.1f GiB) once end to end...\n", path.c_str(), bytes / double(1 << 30));
  std::fflush(stdout);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  if (::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0) {
    std::fprintf(stderr, "%s: fallocate: %s\n", path.c_str(), std::strerror(errno));
    ::close(fd);
    return false;
  }
  constexpr size_t kChunk = 8 * kMiB;
  char* buf = static_cast<char*>(std::aligned_alloc(kvfs::kBlockSize, kChunk));
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < kChunk; i += 8) {
    uint64_t v = rng();
    std::memcpy(buf + i, &v, 8);
  }
  for (uint64_t off = 0; off < bytes; off += kChunk) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, bytes - off));
    if (::pwrite(fd, buf, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
      std::fprintf(stderr, "%s: write: %s\n", path.c_str(), std::strerror(errno));
      std::free(buf);
      ::close(fd);
      return false;
    }
  }
  std::free(buf);
  ::fdatasync(fd);
  ::close(fd);
  return true;
}

// One engine run: `qd` requests of `bs` bytes kept in flight, each
// completion submitting the next at a random bs-aligned offset, for
// `seconds`. Returns MB/s (10^6 bytes per second).
class EngineRun {
 public:
  EngineRun(IoEngine& engine, IoOp op, size_t bs, unsigned qd, uint64_t file_bytes,
            bool heap_buffers)
      : engine_(engine),
        op_(op),
        bs_(bs),
        qd_(qd),
        blocks_(file_bytes / bs),
        heap_buffers_(heap_buffers) {}

  std::optional<double> Run(double seconds) {
    // Every in-flight slot owns a buffer: by default a slot of the
    // registered staging pool (fixed path, huge pages), as the engine's
    // callers above device/ use it; with --heap-buffers plain memory, as fio
    // has.
    slots_.clear();
    for (unsigned i = 0; i < qd_; ++i) {
      Slot s;
      if (heap_buffers_) {
        s.heap.reset(static_cast<char*>(std::aligned_alloc(kvfs::kBlockSize, bs_)));
        s.data = s.heap.get();
      } else {
        s.buf = engine_.buffers().Acquire();
        s.data = s.buf.data();
      }
      s.rng = 0x9E3779B97F4A7C15ULL * (i + 1) +
              static_cast<uint64_t>(Clock::now().time_since_epoch().count());
      for (size_t k = 0; k < bs_; k += 8) {
        uint64_t v = s.rng * (k + 1);
        std::memcpy(s.data + k, &v, 8);
      }
      slots_.push_back(std::move(s));
    }
    inflight_ = qd_;
    bytes_ = 0;
    errors_ = 0;
    Clock::time_point t0 = Clock::now();
    deadline_ = t0 + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(seconds));
    std::vector<IoRequest> first;
    for (unsigned i = 0; i < qd_; ++i) first.push_back(Next(i));
    engine_.Submit(first);
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return inflight_ == 0; });
    }
    double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    slots_.clear();
    if (errors_ > 0) {
      std::fprintf(stderr, "engine: %llu errors, first: %s\n",
                   static_cast<unsigned long long>(errors_.load()), first_error_.c_str());
      return std::nullopt;
    }
    return static_cast<double>(bytes_.load()) / elapsed / 1e6;
  }

 private:
  struct FreeDeleter {
    void operator()(char* p) const { std::free(p); }
  };
  struct Slot {
    PoolBuffer buf;
    std::unique_ptr<char, FreeDeleter> heap;
    char* data = nullptr;
    uint64_t rng = 0;
  };

  IoRequest Next(unsigned slot) {
    Slot& s = slots_[slot];
    s.rng ^= s.rng << 13;
    s.rng ^= s.rng >> 7;
    s.rng ^= s.rng << 17;
    IoRequest req;
    req.op = op_;
    req.device = 0;
    req.byte_off = (s.rng % blocks_) * bs_;
    req.buf = s.data;
    req.len = bs_;
    req.done = [this, slot](Status st) { Done(slot, std::move(st)); };
    return req;
  }

  void Done(unsigned slot, Status st) {
    if (!st.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      if (errors_++ == 0) first_error_ = st.ToString();
    } else {
      bytes_.fetch_add(bs_, std::memory_order_relaxed);
    }
    if (errors_ == 0 && Clock::now() < deadline_) {
      IoRequest req = Next(slot);
      engine_.Submit(std::span<IoRequest>(&req, 1));
      return;
    }
    std::lock_guard<std::mutex> l(mu_);
    if (--inflight_ == 0) cv_.notify_all();
  }

  IoEngine& engine_;
  const IoOp op_;
  const size_t bs_;
  const unsigned qd_;
  const uint64_t blocks_;
  const bool heap_buffers_;
  std::vector<Slot> slots_;
  Clock::time_point deadline_;
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> errors_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  unsigned inflight_ = 0;  // GUARDED_BY(mu_)
  std::string first_error_;  // GUARDED_BY(mu_)
};

bool OnPath(const std::string& prog) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::stringstream ss(path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (!dir.empty() && ::access((dir + "/" + prog).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Runs fio with the engine's parameters; MB/s, or nullopt on failure.
std::optional<double> RunFio(const std::string& file, uint64_t file_bytes, IoOp op, size_t bs,
                             unsigned qd, double seconds, const std::string& extra) {
  const char* rw = op == IoOp::kRead ? "randread" : "randwrite";
  std::string cmd = "fio --name=kvfs-bench --filename='" + file + "' --ioengine=io_uring" +
                    " --direct=1 --rw=" + rw + " --bs=" + std::to_string(bs) +
                    " --iodepth=" + std::to_string(qd) + " --size=" + std::to_string(file_bytes) +
                    " --time_based --runtime=" + std::to_string(static_cast<long>(seconds * 1000)) + "ms" +
                    // Same offset pattern as the engine run: uniform random,
                    // no coverage map.
                    " --norandommap --randrepeat=0 --output-format=json " + extra + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  if (rc != 0) {
    std::fprintf(stderr, "fio failed (status %d): %s\n", rc, cmd.c_str());
    return std::nullopt;
  }
  // fio may print notes before the JSON object.
  size_t brace = out.find('{');
  if (brace == std::string::npos) return std::nullopt;
  auto j = nlohmann::json::parse(out.substr(brace), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("jobs") || j["jobs"].empty()) return std::nullopt;
  const auto& side = j["jobs"][0][op == IoOp::kRead ? "read" : "write"];
  if (side.contains("io_bytes") && side.contains("runtime") &&
      side["runtime"].get<double>() > 0) {
    // Total bytes over runtime (ms), the way the engine run is measured.
    return side["io_bytes"].get<double>() / (side["runtime"].get<double>() / 1000.0) / 1e6;
  }
  return side["bw_bytes"].get<double>() / 1e6;
}

std::string SizeName(size_t bs) {
  return bs >= kMiB ? std::to_string(bs / kMiB) + "M" : std::to_string(bs >> 10) + "K";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Drive the kvfs io_uring engine and compare with fio"};
  std::string file;
  double size_gb = 4;
  double seconds = 3;
  unsigned rounds = 4;
  unsigned rings = 0;
  bool no_fio = false;
  bool heap_buffers = false;
  std::string fio_extra;
  std::vector<unsigned> qds = {1, 4, 16, 32};
  std::vector<size_t> sizes = {128 << 10, 1 << 20};
  std::vector<std::string> ops = {"read", "write"};
  app.add_option("--file", file, "image file to use (created if missing)")->required();
  app.add_option("--size-gb", size_gb, "image size in GiB")->check(CLI::PositiveNumber);
  app.add_option("--seconds", seconds, "run time per point")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "alternating engine/fio slices per point")
      ->check(CLI::Range(1u, 100u));
  app.add_option("--rings", rings, "engine rings (0: sized to the machine)");
  app.add_option("--qd", qds, "queue depths");
  app.add_option("--bs", sizes, "command sizes in bytes (multiples of 4096)");
  app.add_option("--ops", ops, "read and/or write")->check(CLI::IsMember({"read", "write"}));
  app.add_flag("--no-fio", no_fio, "engine only");
  app.add_flag("--heap-buffers", heap_buffers,
               "engine uses plain heap buffers instead of its registered staging pool");
  app.add_option("--fio-extra", fio_extra, "extra arguments for fio");
  CLI11_PARSE(app, argc, argv);

  uint64_t file_bytes = kvfs::AlignDown(static_cast<uint64_t>(size_gb * (1ull << 30)), 1 << 20);
  for (size_t bs : sizes) {
    if (bs == 0 || bs % kvfs::kBlockSize != 0 || bs > file_bytes) {
      std::fprintf(stderr, "bad --bs %zu\n", bs);
      return 2;
    }
  }
  if (!PrepareImage(file, file_bytes)) return 1;
  auto dev = BlockDevice::Open(file, false);
  if (!dev.ok()) {
    std::fprintf(stderr, "%s\n", dev.status().ToString().c_str());
    return 1;
  }
  unsigned max_qd = *std::max_element(qds.begin(), qds.end());
  size_t max_bs = *std::max_element(sizes.begin(), sizes.end());
  IoEngineOptions opt;
  opt.rings = rings;
  opt.queue_depth = std::max(64u, max_qd);
  opt.max_command_bytes = std::max<size_t>(max_bs, 1 << 20);  // one command per request
  opt.staging_slot_bytes = max_bs;
  opt.staging_pool_bytes = max_bs * max_qd;
  auto engine = IoEngine::Create({dev->get()}, opt);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  bool fio = !no_fio && OnPath("fio");
  std::printf(
      "engine: %u rings, queue depth %u per ring, %s buffers; fio: %s; %.1f s per point "
      "and side in %u alternating slices\n\n",
      (*engine)->options().rings, opt.queue_depth, heap_buffers ? "heap" : "registered pool",
      fio ? "yes" : "not run", seconds, rounds);
  std::printf("%-6s %5s %4s %13s %13s %7s\n", "op", "bs", "qd", "engine MB/s", "fio MB/s",
              "ratio");
  std::fflush(stdout);

  double min_ratio = 1e9;
  int point = 0;
  for (const std::string& op_name : ops) {
    IoOp op = op_name == "read" ? IoOp::kRead : IoOp::kWrite;
    for (size_t bs : sizes) {
      for (unsigned qd : qds) {
        // The point's time is cut into `rounds` slices, engine and fio
        // alternating (order flipped every round), so that the device's own
        // drift (this matters on shared virtual disks) hits both alike.
        // Each side's figure is the mean over its slices.
        double e_sum = 0, f_sum = 0;
        bool e_ok = true, f_ok = fio;
        const double slice = seconds / rounds;
        for (unsigned round = 0; round < rounds; ++round) {
          auto engine_run = [&] {
            if (!e_ok) return;
            auto r = EngineRun(**engine, op, bs, qd, file_bytes, heap_buffers).Run(slice);
            e_ok = r.has_value();
            e_sum += r.value_or(0);
          };
          auto fio_run = [&] {
            if (!f_ok) return;
            auto r = RunFio(file, file_bytes, op, bs, qd, slice, fio_extra);
            f_ok = r.has_value();
            f_sum += r.value_or(0);
          };
          if ((point + round) % 2 == 0) {
            engine_run();
            fio_run();
          } else {
            fio_run();
            engine_run();
          }
        }
        std::optional<double> e, f;
        if (e_ok) e = e_sum / rounds;
        if (f_ok) f = f_sum / rounds;
        ++point;
        char es[32] = "error", fs[32] = "-", rs[32] = "-";
        if (e) std::snprintf(es, sizeof(es), "%.1f", *e);
        if (f) std::snprintf(fs, sizeof(fs), "%.1f", *f);
        if (e && f && *f > 0) {
          double r = *e / *f;
          min_ratio = std::min(min_ratio, r);
          std::snprintf(rs, sizeof(rs), "%.3f", r);
        }
        std::printf("%-6s %5s %4u %13s %13s %7s\n", op_name.c_str(), SizeName(bs).c_str(), qd, es,
                    fs, rs);
        std::fflush(stdout);
      }
    }
  }
  if (fio && min_ratio < 1e9) std::printf("\nlowest engine/fio ratio: %.3f\n", min_ratio);
  return 0;
}
