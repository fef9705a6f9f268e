#include "daemon/mount_options.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <sstream>

#include "io/lane.h"

namespace kvfs::daemon {
namespace {

using fs::AtimeMode;
using fs::EvictScope;
using fs::PrefetchMode;
using fuse::PassthroughMode;
using fuse::Transport;
using io::Lane;
using io::LaneIndex;

constexpr uint64_t kSecondNs = 1'000'000'000;
constexpr uint64_t kDayS = 86400;

std::vector<MountOption> BuildTable() {
  std::vector<MountOption> t;
  t.push_back(Text("index", "DIR", [](auto& o) -> auto& { return o.volume.index_dir; },
                   "index directory (default for an image file: IMAGE.index; required for a "
                   "block device)",
                   AbsolutePath));
  t.push_back(Unsigned("dirty_mb", "N", {.min = 1}, kMiB,
                       [](auto& o) -> auto& { return o.volume.engine.staging_pool_bytes; },
                       "memory for staged (not yet written) data, MiB"));
  t.push_back(Unsigned("rings", "N", {}, 1, [](auto& o) -> auto& { return o.volume.engine.rings; },
                       "io_uring rings (0: sized to the machine)"));
  t.push_back(Unsigned("cache_mb", "N", {}, kMiB, [](auto& o) -> auto& { return o.fs.cache_bytes; },
                       "RAM cache of file data, MiB"));
  t.push_back(Choice<PrefetchMode>(
      "prefetch",
      {{"off", PrefetchMode::kOff}, {"open", PrefetchMode::kOpen},
       {"lookup", PrefetchMode::kLookup}},
      [](auto& o) -> auto& { return o.fs.prefetch; },
      "off, open (opening a file reads all of it) or lookup (open, and a lookup of a file "
      "starts reading it)"));
  t.push_back(Unsigned("prefetch_max_mb", "N", {}, kMiB,
                       [](auto& o) -> auto& { return o.fs.prefetch_file_max_bytes; },
                       "larger files are not prefetched whole, MiB"));
  t.push_back(Unsigned("prefetch_budget_mb", "N", {}, kMiB,
                       [](auto& o) -> auto& { return o.fs.prefetch_budget_bytes; },
                       "prefetched bytes not yet read, at most, MiB"));
  t.push_back(Number("entry_timeout", "S", 0,
                     [](auto& o) -> auto& { return o.mount.timeouts.entry_s; },
                     "kernel caching of names, seconds"));
  t.push_back(Number("attr_timeout", "S", 0,
                     [](auto& o) -> auto& { return o.mount.timeouts.attr_s; },
                     "kernel caching of attributes, seconds"));
  t.push_back(Number("negative_timeout", "S", 0,
                     [](auto& o) -> auto& { return o.mount.timeouts.negative_s; },
                     "kernel caching of missing names, seconds (0: off)"));
  t.push_back(Flag("default_permissions", true,
                   [](auto& o) -> auto& { return o.mount.kernel_permissions; },
                   "let the kernel check permissions (it then asks for a directory's attributes "
                   "after each change in it); without it kvfs checks them itself on Linux 6.16+"));
  t.push_back(Unsigned("max_threads", "N", {.min = 1}, 1,
                       [](auto& o) -> auto& { return o.mount.max_threads; },
                       "threads for FUSE requests that may wait, such as writes"));
  t.push_back(Unsigned("spin_us", "N", {}, 1, [](auto& o) -> auto& { return o.mount.spin_us; },
                       "the thread receiving FUSE requests from /dev/fuse polls for the next one "
                       "this long before it sleeps, microseconds"));
  t.push_back(Choice<Transport>(
      "transport", {{"auto", Transport::kAuto}, {"uring", Transport::kUring},
                    {"dev", Transport::kDev}},
      [](auto& o) -> auto& { return o.mount.transport; },
      "how FUSE requests travel: uring (FUSE over io_uring, Linux 6.14+, enable_uring=Y; else "
      "the mount fails), dev (/dev/fuse) or auto (uring where the kernel offers it, else dev)",
      {{"io_uring", Transport::kUring}}));
  t.push_back(Choice<PassthroughMode>(
      "passthrough", {{"auto", PassthroughMode::kAuto}, {"off", PassthroughMode::kOff}},
      [](auto& o) -> auto& { return o.mount.passthrough; },
      "auto: loads of cached files are served by the kernel from kvfs's per-file memory (FUSE "
      "passthrough, Linux 6.9+, root), else through the daemon; off: always through the daemon",
      {{"on", PassthroughMode::kAuto}}));
  t.push_back(Unsigned("uring_entries", "N", {.min = 1, .max = 1024}, 1,
                       [](auto& o) -> auto& { return o.mount.uring_entries; },
                       "io_uring transport: requests in flight per CPU"));
  t.push_back(Unsigned("max_request_mb", "N", {.min = 1, .max = 16}, kMiB,
                       [](auto& o) -> auto& { return o.mount.max_request; },
                       "io_uring transport: largest FUSE read or write, MiB; above 1 the "
                       "kernel's fs.fuse.max_pages_limit must allow it"));
  auto lane = [&t](const char* name, Lane l) {
    t.push_back(Unsigned(name, "N", {}, 1,
                         [i = LaneIndex(l)](auto& o) -> auto& { return o.fs.lane_commands[i]; },
                         std::string("device commands in flight on the ") + io::LaneName(l) +
                             " lane (0: derived from rings; see docs/operations.md)"));
  };
  lane("lane_read", Lane::kRead);
  lane("lane_write", Lane::kWrite);
  lane("lane_prefetch", Lane::kPrefetch);
  lane("lane_meta", Lane::kMeta);
  lane("lane_delete", Lane::kDelete);
  const char* atime_help =
      "when a read moves a file's atime: when it is not newer than mtime/ctime or a day old";
  t.push_back(Flag("relatime", AtimeMode::kRelatime, [](auto& o) -> auto& { return o.fs.atime; },
                   atime_help));
  t.push_back(Flag("strictatime", AtimeMode::kStrictatime,
                   [](auto& o) -> auto& { return o.fs.atime; }, "a read always moves atime"));
  t.push_back(Flag("noatime", AtimeMode::kNoatime, [](auto& o) -> auto& { return o.fs.atime; },
                   "a read never moves atime"));
  t.push_back(Unsigned("atime_flush_s", "N", {.min = 1, .max = kDayS}, 1000,
                       [](auto& o) -> auto& { return o.fs.atime_flush_ms; },
                       "moved atimes not carried by another commit are written this often, "
                       "seconds; a crash loses at most this much"));
  t.push_back(Choice<bool>("evict", {{"off", false}, {"lru", true}},
                           [](auto& o) -> auto& { return o.fs.eviction.enabled; },
                           "when the data space used reaches evict_high, unlink the least "
                           "recently used files down to evict_low"));
  t.push_back(Unsigned("evict_high", "PCT", {.min = 1, .max = 100}, 1,
                       [](auto& o) -> auto& { return o.fs.eviction.high_pct; },
                       "% of data space used that starts an eviction pass"));
  t.push_back(Unsigned("evict_low", "PCT", {.min = 0, .max = 99}, 1,
                       [](auto& o) -> auto& { return o.fs.eviction.low_pct; },
                       "% where the pass stops (below evict_high)"));
  t.push_back(Unsigned("evict_min_age", "S", {.min = 0, .max = 365 * kDayS}, kSecondNs,
                       [](auto& o) -> auto& { return o.fs.eviction.min_age_ns; },
                       "a file used this recently is never evicted, seconds"));
  t.push_back(Choice<EvictScope>(
      "evict_scope", {{"mount", EvictScope::kMount}, {"xattr", EvictScope::kXattr}},
      [](auto& o) -> auto& { return o.fs.eviction.scope; },
      "mount (every file) or xattr (only files under a directory whose user.kvfs.evict says "
      "lru)"));
  t.push_back(UnsignedWith(
      "evict_wait_ms", "N", {.min = 0, .max = 600000},
      [](const DaemonOptions& o) {
        return static_cast<uint64_t>(o.fs.eviction.writer_wait.count());
      },
      [](DaemonOptions& o, uint64_t v) {
        o.fs.eviction.writer_wait = std::chrono::milliseconds(v);
      },
      "a write that finds the volume full waits this long for eviction before ENOSPC, "
      "milliseconds"));
  MountOption ro = Flag("ro", true, [](auto& o) -> auto& { return o.volume.read_only; },
                        "read-only mount: nothing is written to the volume (no atime, no index "
                        "write); read-write mounts of the volume are refused while it is up");
  MountOption rw = Flag("rw", false, [](auto& o) -> auto& { return o.volume.read_only; },
                        "read-write mount");
  ro.to_libfuse = rw.to_libfuse = true;  // the kernel's MS_RDONLY
  t.push_back(std::move(ro));
  t.push_back(std::move(rw));
  t.push_back(Unsigned("busy_wait_s", "N", {.min = 0, .max = 3600}, 1,
                       [](auto& o) -> auto& { return o.busy_wait_s; },
                       "a volume still held by a daemon that is ending (an unmount just "
                       "returned) is waited for this long before the mount fails with \"volume "
                       "is in use\", seconds"));
  t.push_back(Choice<spdlog::level::level_enum>(
      "log_level",
      {{"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
       {"info", spdlog::level::info}, {"warn", spdlog::level::warn},
       {"error", spdlog::level::err}, {"critical", spdlog::level::critical},
       {"off", spdlog::level::off}},
      [](auto& o) -> auto& { return o.log.level; }, "least severe log lines written"));
  t.push_back(Text("log", "syslog|stderr|PATH",
                   [](auto& o) -> auto& { return o.log.destination; },
                   "where log lines go once the daemon is in the background: syslog, its "
                   "standard error (kept, not /dev/null), or appended to the file PATH (also "
                   "in the foreground, beside stderr)",
                   CheckLogDestination));
  t.push_back(Choice<bool>("verify", {{"on", true}, {"off", false}},
                           [](auto& o) -> auto& { return o.fs.verify_reads; },
                           "check every extent read from the device against its crc32c; a "
                           "mismatch fails the read with EIO"));
  for (MountOption& o : FaultOptionTable()) t.push_back(std::move(o));
  return t;
}

// "(default 256; at least 1)": what the usage adds to an option's help.
std::string Suffix(const MountOption& o, const DaemonOptions& defaults) {
  std::string def = o.get(defaults);
  std::string s;
  if (o.kind == OptionKind::kFlag || o.kind == OptionKind::kFlagOrText) {
    if (def == "on") s = "default";
  } else if (!def.empty()) {
    s = "default " + def;
  }
  if (!o.range.empty()) s += (s.empty() ? "" : "; ") + o.range;
  return s.empty() ? "" : "(" + s + ")";
}

// Appends `words` to `out` wrapped at 80 columns, continuation lines
// indented to `indent`, starting at column `col`.
void Wrap(const std::string& words, size_t indent, size_t col, std::string* out) {
  std::istringstream in(words);
  std::string w;
  bool first = true;
  while (in >> w) {
    if (!first && col + 1 + w.size() > 80) {
      *out += "\n" + std::string(indent, ' ');
      col = indent;
    } else if (!first) {
      *out += ' ';
      ++col;
    }
    *out += w;
    col += w.size();
    first = false;
  }
  *out += '\n';
}

}  // namespace

const std::vector<MountOption>& MountOptionTable() {
  static const std::vector<MountOption> table = BuildTable();
  return table;
}

const MountOption* FindMountOption(std::string_view name) {
  for (const MountOption& o : MountOptionTable()) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

std::string MountOptionsUsage() {
  constexpr size_t kHelpColumn = 24;
  const DaemonOptions defaults;
  std::string out;
  for (const MountOption& o : MountOptionTable()) {
    std::string head = "  " + o.name;
    if (o.kind == OptionKind::kFlagOrText) {
      head += "[=" + o.value + "]";
    } else if (!o.value.empty()) {
      head += "=" + o.value;
    }
    out += head;
    size_t col = head.size();
    if (col + 2 > kHelpColumn) {
      out += "\n";
      col = 0;
    }
    out += std::string(kHelpColumn - col, ' ');
    std::string suffix = Suffix(o, defaults);
    Wrap(o.help + (suffix.empty() ? "" : " " + suffix), kHelpColumn, kHelpColumn, &out);
  }
  return out;
}

std::string MountOptionsJson() {
  static constexpr const char* kKinds[] = {"flag", "unsigned", "number", "choice", "text",
                                           "flag_or_text"};
  const DaemonOptions defaults;
  nlohmann::json list = nlohmann::json::array();
  for (const MountOption& o : MountOptionTable()) {
    list.push_back({{"name", o.name},
                    {"kind", kKinds[static_cast<int>(o.kind)]},
                    {"value", o.value},
                    {"default", o.get(defaults)},
                    {"range", o.range},
                    {"help", o.help}});
  }
  return list.dump(1) + "\n";
}

Status FinishMountOptions(DaemonOptions& o) {
  if (o.fs.eviction.low_pct >= o.fs.eviction.high_pct) {
    return Status::Error(EINVAL, "evict_low=" + std::to_string(o.fs.eviction.low_pct) +
                                     ": must be below evict_high (" +
                                     std::to_string(o.fs.eviction.high_pct) + ")");
  }
  // -o ro: the volume is opened read-only (devices O_RDONLY, the index as a
  // RocksDB secondary: nothing is written), under a shared lock.
  o.volume.shared_lock = o.volume.read_only;
  o.fs.read_only = o.volume.read_only;
  return Status::OK();
}

}  // namespace kvfs::daemon
