// kvfs: the mount daemon. Opens a kvfs volume and serves it through FUSE.
//
//   kvfs [-f] [-d] [-o OPTION[,OPTION...]] DEVICE... MOUNTPOINT
//
// Everything that can fail for a reason the user can fix (a missing
// mountpoint, a device that is not kvfs, a foreign index, a volume already
// in use) is checked before the command returns: one line on stderr and a
// non-zero exit. Unless -f, the daemon then runs in the background; the
// command exits 0 once the file system is mounted. SIGTERM, SIGINT, SIGHUP
// and `fusermount3 -u` unmount cleanly: staged data written, the index
// committed and synced, RocksDB closed, exit 0.
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "device/fault_injecting_io.h"
#include "fs/file_system.h"
#include "fuse/daemon.h"
#include "fuse/detach.h"
#include "volume/volume.h"

namespace {

constexpr const char* kUsage =
    "usage: kvfs [-f] [-d] [-o OPTION[,OPTION...]] DEVICE... MOUNTPOINT\n"
    "\n"
    "Mounts the kvfs volume on DEVICE... (block devices or image files made by\n"
    "mkfs.kvfs) at MOUNTPOINT.\n"
    "\n"
    "  -f                    stay in the foreground\n"
    "  -d                    FUSE debug output (implies -f)\n"
    "  -h, --help            this text, then libfuse's options\n"
    "  -V, --version         versions of kvfs and libfuse\n"
    "\n"
    "kvfs options (-o):\n"
    "  index=DIR             index directory (default for an image file: IMAGE.index;\n"
    "                        required for a block device)\n"
    "  dirty_mb=N            memory for staged (not yet written) data, MiB (256)\n"
    "  rings=N               io_uring rings (0: sized to the machine)\n"
    "  cache_mb=N            RAM cache of file data, MiB (1024)\n"
    "  prefetch=MODE         off, open (opening a file reads all of it) or lookup\n"
    "                        (open, and a lookup of a file starts reading it) (lookup)\n"
    "  prefetch_max_mb=N     larger files are not prefetched whole, MiB (64)\n"
    "  prefetch_budget_mb=N  prefetched bytes not yet read, at most, MiB (512)\n"
    "  entry_timeout=S       kernel caching of names, seconds (10)\n"
    "  attr_timeout=S        kernel caching of attributes, seconds (10)\n"
    "  negative_timeout=S    kernel caching of missing names, seconds (10; 0: off)\n"
    "  default_permissions   let the kernel check permissions (it then asks for a\n"
    "                        directory's attributes after each change in it);\n"
    "                        without it kvfs checks them itself on Linux 6.16+\n"
    "  max_threads=N         threads for FUSE requests that may wait, such as\n"
    "                        writes (64)\n"
    "  spin_us=N             the thread receiving FUSE requests from /dev/fuse polls\n"
    "                        for the next one this long before it sleeps,\n"
    "                        microseconds (50)\n"
    "  transport=T           how FUSE requests travel: uring (FUSE over io_uring,\n"
    "                        Linux 6.14+, enable_uring=Y; else the mount fails),\n"
    "                        dev (/dev/fuse) or auto (uring where the kernel\n"
    "                        offers it, else dev) (auto)\n"
    "  passthrough=M         auto: loads of cached files are served by the kernel\n"
    "                        from kvfs's per-file memory (FUSE passthrough, Linux\n"
    "                        6.9+, root), else through the daemon; off: always\n"
    "                        through the daemon (auto)\n"
    "  uring_entries=N       io_uring transport: requests in flight per CPU (16)\n"
    "  max_request_mb=N      io_uring transport: largest FUSE read or write, MiB,\n"
    "                        1 to 16; above 1 the kernel's fs.fuse.max_pages_limit\n"
    "                        must allow it (1)\n"
    "  lane_read=N, lane_write=N, lane_prefetch=N, lane_meta=N, lane_delete=N\n"
    "                        device commands in flight per lane (0: derived from\n"
    "                        rings; see docs/operations.md)\n"
    "  relatime, strictatime, noatime\n"
    "                        when a read moves a file's atime: when it is not newer\n"
    "                        than mtime/ctime or a day old, on every read, or never\n"
    "                        (relatime)\n"
    "  atime_flush_s=N       moved atimes not carried by another commit are written\n"
    "                        this often; a crash loses at most this much (30)\n"
    "  evict=off|lru         when the data space used reaches evict_high, unlink the\n"
    "                        least recently used files down to evict_low (off)\n"
    "  evict_high=PCT        % of data space used that starts an eviction pass (90)\n"
    "  evict_low=PCT         % where the pass stops (80)\n"
    "  evict_min_age=S       a file used this recently is never evicted, seconds (60)\n"
    "  evict_scope=SCOPE     mount (every file) or xattr (only files under a\n"
    "                        directory whose user.kvfs.evict says lru) (mount)\n"
    "  evict_wait_ms=N       a write that finds the volume full waits this long for\n"
    "                        eviction before ENOSPC, milliseconds (2000)\n"
    "  log_level=L           trace, debug, info, warn, error, critical, off (info)\n"
    "  verify=on|off         check every extent read from the device against its\n"
    "                        crc32c; a mismatch fails the read with EIO (off)\n"
    "  fault_injection       tests only: device writes stay in a simulated volatile\n"
    "                        cache until flushed; SIGUSR1 cuts the power (drops them\n"
    "                        and fails all later I/O with EIO)\n"
    "  fault_eio=RULE[/...]  tests only: device I/O overlapping a rule's byte range\n"
    "                        fails with EIO; RULE is OP:OFFSET:LEN[:DEVICE], OP one\n"
    "                        of read, write, flush; DEVICE counts from 0 (0)\n"
    "  shape[=RULE[/...]]    tests and benchmarks: each device completes commands as\n"
    "                        an NVMe drive would (80 us per command, 2000 MB/s);\n"
    "                        RULE is LAT_US:MB_S[:DEVICE], DEVICE counts from 0\n"
    "\n"
    "Other -o options go to libfuse and the kernel (see below with -h).\n";

// Filled by fuse_opt_parse (a C struct: libfuse writes fields by offset).
struct Config {
  char* index = nullptr;
  unsigned dirty_mb = 256;
  unsigned rings = 0;
  unsigned cache_mb = 1024;
  char* prefetch = nullptr;
  unsigned prefetch_max_mb = 64;
  unsigned prefetch_budget_mb = 512;
  double entry_timeout = 10.0;
  double attr_timeout = 10.0;
  double negative_timeout = 10.0;
  unsigned max_threads = 64;
  unsigned spin_us = 50;
  char* transport = nullptr;
  char* passthrough = nullptr;
  unsigned uring_entries = 16;
  unsigned max_request_mb = 1;
  // In-flight commands per lane (0: default), io::Lane order.
  unsigned lane_meta = 0, lane_read = 0, lane_prefetch = 0, lane_write = 0, lane_delete = 0;
  char* log_level = nullptr;
  char* verify = nullptr;
  kvfs::fs::AtimeMode atime = kvfs::fs::AtimeMode::kRelatime;
  unsigned atime_flush_s = 30;
  char* evict = nullptr;
  unsigned evict_high = 90, evict_low = 80;
  unsigned evict_min_age = 60;
  char* evict_scope = nullptr;
  unsigned evict_wait_ms = 2000;
  int fault_injection = 0;
  int default_permissions = 0;
  char* fault_eio = nullptr;
  int shape = 0;
  char* shape_spec = nullptr;
  int foreground = 0;
  int show_help = 0;
  int show_version = 0;
};

// The strings fuse_opt_parse allocated into `cfg`.
void FreeStrings(Config& cfg) {
  for (char* p : {cfg.index, cfg.log_level, cfg.prefetch, cfg.verify, cfg.fault_eio, cfg.transport,
                 cfg.passthrough, cfg.shape_spec, cfg.evict, cfg.evict_scope}) {
    std::free(p);
  }
}

struct Parsed {
  Config cfg;
  std::vector<std::string> positional;  // DEVICE... MOUNTPOINT
};

enum Key { kKeyForeground, kKeyDebug, kKeyHelp, kKeyVersion, kKeyRelatime, kKeyStrictatime,
           kKeyNoatime };

#define KVFS_OPT(t, field) {t, offsetof(Config, field), 1}
const fuse_opt kOptions[] = {
    KVFS_OPT("index=%s", index),
    KVFS_OPT("dirty_mb=%u", dirty_mb),
    KVFS_OPT("rings=%u", rings),
    KVFS_OPT("cache_mb=%u", cache_mb),
    KVFS_OPT("prefetch=%s", prefetch),
    KVFS_OPT("prefetch_max_mb=%u", prefetch_max_mb),
    KVFS_OPT("prefetch_budget_mb=%u", prefetch_budget_mb),
    KVFS_OPT("entry_timeout=%lf", entry_timeout),
    KVFS_OPT("attr_timeout=%lf", attr_timeout),
    KVFS_OPT("negative_timeout=%lf", negative_timeout),
    KVFS_OPT("max_threads=%u", max_threads),
    KVFS_OPT("default_permissions", default_permissions),
    KVFS_OPT("spin_us=%u", spin_us),
    KVFS_OPT("transport=%s", transport),
    KVFS_OPT("passthrough=%s", passthrough),
    KVFS_OPT("uring_entries=%u", uring_entries),
    KVFS_OPT("max_request_mb=%u", max_request_mb),
    KVFS_OPT("lane_meta=%u", lane_meta),
    KVFS_OPT("lane_read=%u", lane_read),
    KVFS_OPT("lane_prefetch=%u", lane_prefetch),
    KVFS_OPT("lane_write=%u", lane_write),
    KVFS_OPT("lane_delete=%u", lane_delete),
    KVFS_OPT("log_level=%s", log_level),
    KVFS_OPT("verify=%s", verify),
    KVFS_OPT("fault_injection", fault_injection),
    KVFS_OPT("fault_eio=%s", fault_eio),
    KVFS_OPT("shape", shape),
    KVFS_OPT("shape=%s", shape_spec),
    KVFS_OPT("atime_flush_s=%u", atime_flush_s),
    KVFS_OPT("evict=%s", evict),
    KVFS_OPT("evict_high=%u", evict_high),
    KVFS_OPT("evict_low=%u", evict_low),
    KVFS_OPT("evict_min_age=%u", evict_min_age),
    KVFS_OPT("evict_scope=%s", evict_scope),
    KVFS_OPT("evict_wait_ms=%u", evict_wait_ms),
    FUSE_OPT_KEY("relatime", kKeyRelatime),
    FUSE_OPT_KEY("strictatime", kKeyStrictatime),
    FUSE_OPT_KEY("noatime", kKeyNoatime),
    // Options mount(8) passes from fstab that libfuse 3.14 refuses and
    // that mean nothing for kvfs, so they are dropped.
    FUSE_OPT_KEY("norelatime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("nostrictatime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("diratime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("nodiratime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("lazytime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("nolazytime", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("iversion", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("noiversion", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("mand", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("nomand", FUSE_OPT_KEY_DISCARD),
    FUSE_OPT_KEY("-f", kKeyForeground),
    FUSE_OPT_KEY("-d", kKeyDebug),
    FUSE_OPT_KEY("debug", kKeyDebug),
    FUSE_OPT_KEY("-h", kKeyHelp),
    FUSE_OPT_KEY("--help", kKeyHelp),
    FUSE_OPT_KEY("-V", kKeyVersion),
    FUSE_OPT_KEY("--version", kKeyVersion),
    FUSE_OPT_END,
};
#undef KVFS_OPT

// Returns 0 to consume an argument, 1 to pass it on to libfuse.
int ProcessArg(void* data, const char* arg, int key, fuse_args* /*outargs*/) {
  Parsed& p = *static_cast<Parsed*>(data);
  switch (key) {
    case FUSE_OPT_KEY_NONOPT:
      p.positional.emplace_back(arg);
      return 0;
    case kKeyForeground:
      p.cfg.foreground = 1;
      return 0;
    case kKeyDebug:  // libfuse's own debug output needs a terminal
      p.cfg.foreground = 1;
      return 1;
    case kKeyHelp:
      p.cfg.show_help = 1;
      return 0;
    case kKeyVersion:
      p.cfg.show_version = 1;
      return 0;
    // kvfs keeps atime itself (fs/atime.h); the kernel's flags would not
    // reach it.
    case kKeyRelatime:
      p.cfg.atime = kvfs::fs::AtimeMode::kRelatime;
      return 0;
    case kKeyStrictatime:
      p.cfg.atime = kvfs::fs::AtimeMode::kStrictatime;
      return 0;
    case kKeyNoatime:
      p.cfg.atime = kvfs::fs::AtimeMode::kNoatime;
      return 0;
    default:
      return 1;
  }
}

[[noreturn]] void Fail(const std::string& msg) {
  std::fprintf(stderr, "kvfs: %s\n", msg.c_str());
  std::exit(1);
}

// realpath(3), or a one-line failure naming `what`.
std::string Resolve(const std::string& path, const char* what) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) {
    Fail(std::string(what) + " " + path + ": " + std::strerror(errno));
  }
  return buf;
}

// Logs go to stderr; once the daemon is in the background, to syslog.
std::shared_ptr<spdlog::sinks::dist_sink_mt> SetUpLogging(const char* level_name) {
  spdlog::level::level_enum level = spdlog::level::info;
  if (level_name != nullptr) {
    level = spdlog::level::from_str(level_name);
    if (level == spdlog::level::off && std::strcmp(level_name, "off") != 0) {
      Fail(std::string("log_level=") + level_name +
           ": not one of trace, debug, info, warn, error, critical, off");
    }
  }
  auto dist = std::make_shared<spdlog::sinks::dist_sink_mt>();
  dist->add_sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  auto logger = std::make_shared<spdlog::logger>("kvfs", dist);
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  return dist;
}

// -o fault_eio=RULE[/RULE...] (device-error tests): one failing range of
// FaultInjectingIo::FailRange() per rule, "OP:OFFSET:LEN[:DEVICE]". Rules are
// separated by '/' because libfuse splits -o at commas.
struct FaultRule {
  kvfs::device::IoOp op = kvfs::device::IoOp::kRead;
  uint32_t device = 0;
  uint64_t byte_off = 0;
  uint64_t len = 0;
};

std::vector<FaultRule> ParseFaultRules(const std::string& spec, size_t devices) {
  std::vector<FaultRule> rules;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find('/', start);
    if (end == std::string::npos) end = spec.size();
    const std::string rule = spec.substr(start, end - start);
    std::vector<std::string> f;
    for (size_t a = 0;;) {
      size_t b = rule.find(':', a);
      f.push_back(rule.substr(a, b == std::string::npos ? std::string::npos : b - a));
      if (b == std::string::npos) break;
      a = b + 1;
    }
    auto bad = [&](const std::string& why) {
      Fail("fault_eio: rule '" + rule + "': " + why + " (want OP:OFFSET:LEN[:DEVICE])");
    };
    if (f.size() != 3 && f.size() != 4) bad("wrong number of fields");
    FaultRule r;
    if (f[0] == "read") {
      r.op = kvfs::device::IoOp::kRead;
    } else if (f[0] == "write") {
      r.op = kvfs::device::IoOp::kWrite;
    } else if (f[0] == "flush") {
      r.op = kvfs::device::IoOp::kFlush;
    } else {
      bad("OP must be read, write or flush");
    }
    auto number = [&](const std::string& t, const char* what) -> uint64_t {
      char* e = nullptr;
      errno = 0;
      unsigned long long v = std::strtoull(t.c_str(), &e, 0);
      if (t.empty() || *e != '\0' || errno != 0 || t[0] == '-') {
        bad(std::string(what) + " is not a number");
      }
      return v;
    };
    r.byte_off = number(f[1], "OFFSET");
    r.len = number(f[2], "LEN");
    if (r.len == 0 && r.op != kvfs::device::IoOp::kFlush) bad("LEN must not be 0");
    if (f.size() == 4) {
      uint64_t d = number(f[3], "DEVICE");
      if (d >= devices) bad("DEVICE past the last device");
      r.device = static_cast<uint32_t>(d);
    }
    rules.push_back(r);
    start = end + 1;
  }
  return rules;
}

// -o fault_injection (crash tests): the volume's device I/O goes through a
// FaultInjectingIo in power-cut mode, and SIGUSR1 cuts the power; with
// -o fault_eio, through one with those failing ranges. The signal
// is taken by sigwait() on a thread of its own (PowerCut() takes locks, so
// it cannot run in a signal handler); main() blocks SIGUSR1 before any
// thread exists so that only that thread receives it.
class PowerCutSwitch {
 public:
  // Blocks SIGUSR1 in the calling thread and the threads it creates later.
  static void BlockSignal() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
  // For VolumeOptions::wrap_io.
  std::unique_ptr<kvfs::device::BlockIo> Wrap(kvfs::device::BlockIo& inner, bool power_cut,
                                              const std::vector<FaultRule>& rules) {
    auto io = std::make_unique<kvfs::device::FaultInjectingIo>(inner);
    if (power_cut) io->EnablePowerCutMode();
    for (const FaultRule& r : rules) io->FailRange(r.op, r.device, r.byte_off, r.len, EIO);
    io_ = io.get();
    return io;
  }
  // Starts waiting for SIGUSR1. REQUIRES: Wrap() ran (the volume is open).
  void Arm() {
    thread_ = std::thread([this] {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGUSR1);
      int sig = 0;
      while (sigwait(&set, &sig) != 0) {
      }
      if (stopping_) return;
      spdlog::warn("SIGUSR1: power cut (fault injection): unflushed writes dropped");
      io_->PowerCut();
    });
  }
  // Ends the waiting thread (without a power cut if none came).
  // REQUIRES: before the volume is closed.
  void Disarm() {
    if (!thread_.joinable()) return;
    stopping_ = true;
    pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
  }

 private:
  kvfs::device::FaultInjectingIo* io_ = nullptr;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// The daemon holds a descriptor per index table file (RocksDB keeps them all
// open) and per client process with registered buffers (a pidfd): the usual
// soft limit of 1024 is too few for a long-lived mount with many clients.
// Raised to the hard limit, as servers do.
void RaiseOpenFileLimit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  rlim_t was = r.rlim_cur;
  r.rlim_cur = r.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &r) != 0) {
    spdlog::warn("cannot raise the open file limit above {}: {}", was, std::strerror(errno));
    return;
  }
  spdlog::debug("open file limit raised from {} to {}", was, r.rlim_cur);
}

}  // namespace

int main(int argc, char** argv) {
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  Parsed p;
  if (fuse_opt_parse(&args, &p, kOptions, ProcessArg) != 0) {
    Fail("bad options (try kvfs --help)");
  }
  Config& cfg = p.cfg;
  if (cfg.show_help || cfg.show_version) {
    if (cfg.show_help) {
      std::printf("%s\nlibfuse options:\n", kUsage);
      std::fflush(stdout);
      fuse_lowlevel_help();
    } else {
      std::printf("kvfs %s\n", KVFS_VERSION);
      std::fflush(stdout);
      fuse_lowlevel_version();
    }
    fuse_opt_free_args(&args);
    FreeStrings(cfg);
    return 0;
  }
  if (p.positional.size() < 2) {
    std::fputs(kUsage, stderr);
    return 1;
  }
  if (cfg.dirty_mb == 0) Fail("dirty_mb must be at least 1");
  if (cfg.max_threads == 0) Fail("max_threads must be at least 1");
  if (cfg.entry_timeout < 0 || cfg.attr_timeout < 0 || cfg.negative_timeout < 0) {
    Fail("timeouts must not be negative");
  }
  kvfs::fs::FileSystemOptions fsopt;
  fsopt.cache_bytes = static_cast<uint64_t>(cfg.cache_mb) << 20;
  fsopt.lane_commands = {cfg.lane_meta, cfg.lane_read, cfg.lane_prefetch, cfg.lane_write,
                         cfg.lane_delete};
  fsopt.prefetch_file_max_bytes = static_cast<uint64_t>(cfg.prefetch_max_mb) << 20;
  fsopt.prefetch_budget_bytes = static_cast<uint64_t>(cfg.prefetch_budget_mb) << 20;
  if (cfg.atime_flush_s == 0 || cfg.atime_flush_s > 86400) Fail("atime_flush_s must be 1 to 86400");
  fsopt.atime = cfg.atime;
  fsopt.atime_flush_ms = cfg.atime_flush_s * 1000;
  if (cfg.evict != nullptr) {
    const std::string v = cfg.evict;
    if (v == "lru") {
      fsopt.eviction.enabled = true;
    } else if (v != "off") {
      Fail("evict=" + v + ": not one of off, lru");
    }
  }
  if (cfg.evict_high == 0 || cfg.evict_high > 100) Fail("evict_high must be 1 to 100");
  if (cfg.evict_low >= cfg.evict_high) Fail("evict_low must be below evict_high");
  if (cfg.evict_min_age > 86400 * 365) Fail("evict_min_age must be at most a year, in seconds");
  if (cfg.evict_wait_ms > 600000) Fail("evict_wait_ms must be at most 600000");
  fsopt.eviction.high_pct = cfg.evict_high;
  fsopt.eviction.low_pct = cfg.evict_low;
  fsopt.eviction.min_age_ns = static_cast<int64_t>(cfg.evict_min_age) * 1'000'000'000;
  fsopt.eviction.writer_wait = std::chrono::milliseconds(cfg.evict_wait_ms);
  if (cfg.evict_scope != nullptr) {
    const std::string v = cfg.evict_scope;
    if (v == "xattr") {
      fsopt.eviction.scope = kvfs::fs::EvictScope::kXattr;
    } else if (v != "mount") {
      Fail("evict_scope=" + v + ": not one of mount, xattr");
    }
  }
  if (cfg.prefetch != nullptr) {
    std::string mode = cfg.prefetch;
    if (mode == "off") {
      fsopt.prefetch = kvfs::fs::PrefetchMode::kOff;
    } else if (mode == "open") {
      fsopt.prefetch = kvfs::fs::PrefetchMode::kOpen;
    } else if (mode == "lookup") {
      fsopt.prefetch = kvfs::fs::PrefetchMode::kLookup;
    } else {
      Fail("prefetch=" + mode + ": not one of off, open, lookup");
    }
  }
  if (cfg.verify != nullptr) {
    std::string v = cfg.verify;
    if (v == "on") {
      fsopt.verify_reads = true;
    } else if (v != "off") {
      Fail("verify=" + v + ": not one of on, off");
    }
  }
  auto log_sinks = SetUpLogging(cfg.log_level);

  // Absolute paths: the daemon changes to / and RocksDB opens files in the
  // index directory for as long as it runs.
  std::vector<std::string> devices;
  for (size_t i = 0; i + 1 < p.positional.size(); ++i) {
    devices.push_back(Resolve(p.positional[i], "device"));
  }
  std::string mountpoint = Resolve(p.positional.back(), "mountpoint");
  struct stat mst;
  if (stat(mountpoint.c_str(), &mst) != 0 || !S_ISDIR(mst.st_mode)) {
    Fail("mountpoint " + mountpoint + ": not a directory");
  }
  kvfs::volume::VolumeOptions vopt;
  if (cfg.index != nullptr) {
    std::error_code ec;
    vopt.index_dir = std::filesystem::absolute(cfg.index, ec).lexically_normal().string();
    if (ec) Fail(std::string("index ") + cfg.index + ": " + ec.message());
  }
  vopt.engine.staging_pool_bytes = static_cast<size_t>(cfg.dirty_mb) << 20;
  vopt.engine.rings = cfg.rings;
  if (cfg.shape || cfg.shape_spec != nullptr) {
    auto shapes = kvfs::device::ParseDeviceShapes(cfg.shape_spec ? cfg.shape_spec : "",
                                                  static_cast<uint32_t>(devices.size()));
    if (!shapes.ok()) Fail(shapes.status().ToString());
    vopt.shapes = std::move(shapes).value();
  }

  // What mount(8) and /proc/mounts show: fuse.kvfs, and the first device.
  std::string fsname = devices[0];
  if (fsname.find_first_of(",\\") != std::string::npos) fsname = "kvfs";
  std::string names = "-osubtype=kvfs,fsname=" + fsname;
  // Inserted before the user's options so that theirs win.
  if (fuse_opt_insert_arg(&args, 1, names.c_str()) != 0) Fail("out of memory");

  // Before any thread exists: the signals that end the session must reach
  // the thread running its loop (fuse/daemon.h), and fork keeps only the
  // calling thread.
  kvfs::fuse::BlockTerminationSignals();
  PowerCutSwitch power;
  std::vector<FaultRule> fault_rules;
  if (cfg.fault_eio != nullptr) fault_rules = ParseFaultRules(cfg.fault_eio, devices.size());
  if (cfg.fault_injection) PowerCutSwitch::BlockSignal();
  if (cfg.fault_injection || !fault_rules.empty()) {
    vopt.wrap_io = [&power, &cfg, &fault_rules](kvfs::device::BlockIo& inner) {
      return power.Wrap(inner, cfg.fault_injection != 0, fault_rules);
    };
  }
  // The FUSE session first: bad options fail before the volume is touched.
  kvfs::fuse::MountOptions mopt;
  mopt.timeouts.entry_s = cfg.entry_timeout;
  mopt.timeouts.attr_s = cfg.attr_timeout;
  mopt.timeouts.negative_s = cfg.negative_timeout;
  mopt.max_threads = cfg.max_threads;
  mopt.spin_us = cfg.spin_us;
  mopt.kernel_permissions = cfg.default_permissions != 0;
  if (cfg.transport != nullptr && !kvfs::fuse::ParseTransport(cfg.transport, &mopt.transport)) {
    Fail(std::string("transport=") + cfg.transport + ": not one of auto, uring, dev");
  }
  if (cfg.uring_entries == 0 || cfg.uring_entries > 1024) Fail("uring_entries must be 1 to 1024");
  mopt.uring_entries = cfg.uring_entries;
  if (cfg.max_request_mb == 0 || cfg.max_request_mb > 16) Fail("max_request_mb must be 1 to 16");
  mopt.max_request = cfg.max_request_mb << 20;
  if (cfg.passthrough != nullptr &&
      !kvfs::fuse::ParsePassthroughMode(cfg.passthrough, &mopt.passthrough)) {
    Fail(std::string("passthrough=") + cfg.passthrough + ": not one of auto, off");
  }
  // Per-file memory is what the kernel serves from; where it cannot
  // (passthrough=off, not root) the cache stays in chunks, as it always was.
  fsopt.file_memory = kvfs::fuse::Passthrough(mopt.passthrough).may_activate();
  auto mount = kvfs::fuse::Mount::Create(mopt, &args);
  if (!mount.ok()) Fail(mount.status().ToString());

  std::optional<kvfs::fuse::Detacher> detacher;
  if (!cfg.foreground) {
    auto d = kvfs::fuse::Detacher::Fork();  // the parent exits in there
    if (!d.ok()) Fail(d.status().ToString());
    detacher.emplace(std::move(d).value());
  }

  RaiseOpenFileLimit();
  auto volume = kvfs::volume::Volume::Open(devices, vopt);
  if (!volume.ok()) Fail(volume.status().ToString());
  if (cfg.fault_injection) power.Arm();
  struct DisarmFirst {  // the switch's thread ends before the volume closes
    PowerCutSwitch& p;
    ~DisarmFirst() { p.Disarm(); }
  } disarm{power};
  // From here on, failures return (not exit) so that the volume's threads
  // stop and its index closes in the destructors.
  auto fs = kvfs::fs::FileSystem::Create(**volume, fsopt);
  if (!fs.ok()) {
    std::fprintf(stderr, "kvfs: %s\n", fs.status().ToString().c_str());
    return 1;
  }
  kvfs::Status mounted = (*mount)->MountAt(**fs, mountpoint);
  if (!mounted.ok()) {
    std::fprintf(stderr, "kvfs: %s\n", mounted.ToString().c_str());
    return 1;
  }
  if (detacher) {
    log_sinks->set_sinks({std::make_shared<spdlog::sinks::syslog_sink_mt>(
        "kvfs", LOG_PID, LOG_DAEMON, /*enable_formatting=*/false)});
    detacher->Ready();
  }
  spdlog::info("mounted {} at {}{}", devices[0], mountpoint,
               fsopt.verify_reads ? " (verify=on)" : "");
  for (size_t d = 0; d < vopt.shapes.size(); ++d) {
    spdlog::warn("shape: device {} modelled as {} us per command, {} MB/s (test hook)", d,
                 vopt.shapes[d].latency_ns / 1000, vopt.shapes[d].bytes_per_s / 1'000'000);
  }
  if (!fault_rules.empty()) {
    spdlog::warn("fault_eio: {} failing device range(s) injected (test hook)", fault_rules.size());
  }

  kvfs::Status run = (*mount)->Run();
  mount->reset();  // unmounted; every reply sent
  if (!run.ok()) spdlog::error("{}", run.ToString());

  kvfs::Status shut = (*fs)->Shutdown();
  if (!shut.ok()) spdlog::error("writing out staged data: {}", shut.ToString());
  fs->reset();
  power.Disarm();
  volume->reset();  // the index (RocksDB) is closed, the devices unlocked
  spdlog::info("unmounted {}", mountpoint);

  fuse_opt_free_args(&args);
  FreeStrings(cfg);
  return run.ok() && shut.ok() ? 0 : 1;
}
