// kvfsctl: look at and steer a mounted kvfs volume through its control
// directory MOUNT/.kvfs/ (src/fuse/control.h). See man/kvfsctl.8.
//
//   kvfsctl stats MOUNT [--watch [SECONDS]] [--json]
//   kvfsctl df MOUNT [--bytes]
//   kvfsctl evict MOUNT --to PERCENT
//   kvfsctl prefetch MOUNT PATH...
//   kvfsctl drop-cache MOUNT
//   kvfsctl flush MOUNT
//   kvfsctl --version
//
// Exit status: 0 success; 1 the operation failed (a control file returned
// an error, a PATH could not be prefetched; the others were still tried);
// 2 usage error; 3 MOUNT is not a kvfs mount point (or cannot be reached).
// --watch ends with 0 on SIGINT or SIGTERM.
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ctl/control_mount.h"
#include "ctl/stats_view.h"

namespace {

using kvfs::Result;
using kvfs::Status;
using kvfs::ctl::ControlMount;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotKvfs = 3;

void PrintError(const Status& st) {
  std::fprintf(stderr, "kvfsctl: %s\n", kvfs::ctl::Describe(st).c_str());
}

// Opens MOUNT into *out; on failure prints why (one line) and returns false.
bool OpenMount(const std::string& path, std::optional<ControlMount>* out) {
  Result<ControlMount> m = ControlMount::Open(path);
  if (!m.ok()) {
    PrintError(m.status());
    return false;
  }
  out->emplace(std::move(m.value()));
  return true;
}

Result<nlohmann::json> ReadStats(const ControlMount& m) {
  KVFS_ASSIGN_OR_RETURN(std::string text, m.ReadControl("stats"));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::Error(EBADMSG, m.ControlPath("stats") + ": not a JSON object");
  }
  return j;
}

std::string Header(const ControlMount& m) {
  char when[32];
  const time_t t = time(nullptr);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
  return "kvfs at " + m.mount_point() + " (" + m.source() + ")  " + when +
         "  latencies since mount";
}

// Blocks SIGINT and SIGTERM so that --watch takes them in WaitOrSignal()
// and ends cleanly, never in the middle of a read or a half-drawn table.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// Sleeps `seconds`; false when a stop signal came first (or was pending).
bool WaitOrSignal(const sigset_t& set, double seconds) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>((seconds - static_cast<double>(ts.tv_sec)) * 1e9);
  for (;;) {
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return false;
    if (errno == EAGAIN) return true;
    // EINTR (another signal, e.g. SIGWINCH or a stop/continue): the
    // timeout is not updated; a slightly longer sleep is harmless.
  }
}

int Stats(const std::string& mount, bool json, bool watch, double interval_s) {
  std::optional<ControlMount> m;
  if (!OpenMount(mount, &m)) return kExitNotKvfs;
  if (!watch) {
    Result<nlohmann::json> s = ReadStats(*m);
    if (!s.ok()) {
      PrintError(s.status());
      return kExitFailed;
    }
    std::fputs(json ? (s->dump(2) + "\n").c_str()
                    : kvfs::ctl::RenderStats(*s, nullptr, 0, Header(*m)).c_str(),
               stdout);
    return kExitOk;
  }
  const sigset_t stop = BlockStopSignals();
  const bool tty = ::isatty(STDOUT_FILENO);
  nlohmann::json prev;
  timespec prev_t{};
  bool have_prev = false;
  for (;;) {
    Result<nlohmann::json> s = ReadStats(*m);
    if (!s.ok()) {
      PrintError(s.status());
      return kExitFailed;
    }
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    std::string out;
    if (json) {
      // JSON Lines: one compact document per refresh.
      out = s->dump() + "\n";
    } else {
      const double dt = have_prev ? static_cast<double>(t.tv_sec - prev_t.tv_sec) +
                                        static_cast<double>(t.tv_nsec - prev_t.tv_nsec) / 1e9
                                  : 0;
      // On a terminal: home the cursor and clear, so the table stays in
      // place; into a pipe or file: one table after another.
      out = tty ? "\033[H\033[2J" : (have_prev ? "\n" : "");
      out += kvfs::ctl::RenderStats(*s, have_prev ? &prev : nullptr, dt, Header(*m));
    }
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    prev = std::move(*s);
    prev_t = t;
    have_prev = true;
    if (!WaitOrSignal(stop, interval_s)) return kExitOk;
  }
}

bool EvictionOn(const nlohmann::json& s) {
  auto it = s.find("eviction");
  return it != s.end() && it->is_object() && it->value("on", false);
}

// One line on eviction for df: off, or the watermarks and what went.
std::string EvictionLine(const nlohmann::json& s) {
  if (!EvictionOn(s)) return "Eviction: off";
  const nlohmann::json& e = s["eviction"];
  char line[256];
  std::snprintf(line, sizeof(line),
                "Eviction: LRU from %u%% down to %u%% used, files used within %.0f s kept, "
                "scope %s; %llu files (%s) evicted since mount",
                e.value("high_pct", 0u), e.value("low_pct", 0u), e.value("min_age_s", 0.0),
                e.value("scope", std::string("mount")).c_str(),
                static_cast<unsigned long long>(e.value("files", uint64_t{0})),
                kvfs::ctl::HumanBytes(e.value("bytes", uint64_t{0})).c_str());
  return line;
}

// df -h columns for one kvfs mount; exact bytes with `bytes`.
int Df(const std::string& mount, bool bytes) {
  std::optional<ControlMount> m;
  if (!OpenMount(mount, &m)) return kExitNotKvfs;
  struct statvfs sv;
  if (statvfs(m->mount_point().c_str(), &sv) != 0) {
    PrintError(Status::FromErrno(m->mount_point()));
    return kExitFailed;
  }
  Result<nlohmann::json> s = ReadStats(*m);
  if (!s.ok()) {
    PrintError(s.status());
    return kExitFailed;
  }
  const uint64_t size = uint64_t{sv.f_blocks} * sv.f_frsize;
  const uint64_t used = uint64_t{sv.f_blocks - sv.f_bfree} * sv.f_frsize;
  const uint64_t avail = uint64_t{sv.f_bavail} * sv.f_frsize;
  uint64_t largest = 0;
  if (auto it = s->find("space"); it != s->end() && it->is_object()) {
    largest = it->value("largest_free_bytes", uint64_t{0});
  }
  auto n = [&](uint64_t v) { return bytes ? std::to_string(v) : kvfs::ctl::HumanBytes(v); };
  const int w = bytes ? 14 : 6;
  std::printf("%-30s %*s %*s %*s %4s %*s %s\n", "Filesystem", w, "Size", w, "Used", w, "Avail",
              "Use%", w + 2, "Largest", "Mounted on");
  auto row = [&](const std::string& name, uint64_t size, uint64_t used, uint64_t avail,
                 uint64_t largest, const std::string& on) {
    // Use%, as df: used / (used + available), rounded up.
    const std::string pct =
        used + avail ? std::to_string((used * 100 + used + avail - 1) / (used + avail)) + "%"
                     : "-";
    std::printf("%-30s %*s %*s %*s %4s %*s %s\n", name.c_str(), w, n(size).c_str(), w,
                n(used).c_str(), w, n(avail).c_str(), pct.c_str(), w + 2, n(largest).c_str(),
                on.c_str());
  };
  row(m->source(), size, used, avail, largest, m->mount_point());
  // A volume of several devices: a row per device, which sum to the line
  // above (a daemon that does not report device space shows none).
  if (auto it = s->find("devices"); it != s->end() && it->is_array() && it->size() > 1) {
    for (const nlohmann::json& d : *it) {
      if (!d.is_object() || !d.contains("size_bytes")) break;
      row("  " + std::to_string(d.value("device", 0u)) + ": " + d.value("path", std::string()),
          d.value("size_bytes", uint64_t{0}), d.value("used_bytes", uint64_t{0}),
          d.value("free_bytes", uint64_t{0}), d.value("largest_free_bytes", uint64_t{0}), "");
    }
  }
  std::printf("%s\n", EvictionLine(*s).c_str());
  return kExitOk;
}

// Files and bytes evicted since mount, from a stats document.
std::pair<uint64_t, uint64_t> Evicted(const nlohmann::json& s) {
  auto it = s.find("eviction");
  if (it == s.end() || !it->is_object()) return {0, 0};
  return {it->value("files", uint64_t{0}), it->value("bytes", uint64_t{0})};
}

int Evict(const std::string& mount, unsigned to_pct) {
  std::optional<ControlMount> m;
  if (!OpenMount(mount, &m)) return kExitNotKvfs;
  Result<nlohmann::json> before = ReadStats(*m);
  if (!before.ok()) {
    PrintError(before.status());
    return kExitFailed;
  }
  Status st = m->WriteControl("evict", std::to_string(to_pct) + "\n");
  if (!st.ok()) {
    PrintError(st.code() == EINVAL && !EvictionOn(*before)
                   ? Status::Error(EINVAL, mount + ": eviction is off (mount with -o evict=lru)")
                   : st);
    return kExitFailed;
  }
  Result<nlohmann::json> after = ReadStats(*m);
  struct statvfs sv;
  if (!after.ok() || statvfs(m->mount_point().c_str(), &sv) != 0) {
    PrintError(after.ok() ? Status::FromErrno(m->mount_point()) : after.status());
    return kExitFailed;
  }
  const auto [f0, b0] = Evicted(*before);
  const auto [f1, b1] = Evicted(*after);
  const double used_pct =
      sv.f_blocks ? 100.0 * static_cast<double>(sv.f_blocks - sv.f_bfree) / sv.f_blocks : 0;
  std::printf("evicted %llu files (%s); %.1f%% of the data space used\n",
              static_cast<unsigned long long>(f1 - f0), kvfs::ctl::HumanBytes(b1 - b0).c_str(),
              used_pct);
  return kExitOk;
}

// One write to .kvfs/prefetch per PATH, so that each gets its own answer.
int Prefetch(const std::string& mount, const std::vector<std::string>& paths) {
  std::optional<ControlMount> m;
  if (!OpenMount(mount, &m)) return kExitNotKvfs;
  int rc = kExitOk;
  for (const std::string& p : paths) {
    Status st = [&]() -> Status {
      KVFS_ASSIGN_OR_RETURN(std::string name, m->NameInMount(p));
      return m->WriteControl("prefetch", name + "\n")
          .Annotate(p);  // the daemon's errno, for the user's PATH
    }();
    if (!st.ok()) {
      PrintError(st);
      rc = kExitFailed;
    }
  }
  return rc;
}

int Write(const std::string& mount, const char* file) {
  std::optional<ControlMount> m;
  if (!OpenMount(mount, &m)) return kExitNotKvfs;
  Status st = m->WriteControl(file, "1\n");
  if (!st.ok()) {
    PrintError(st);
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Show statistics of a mounted kvfs volume and control its cache."};
  app.name("kvfsctl");
  app.set_version_flag("--version", std::string("kvfsctl ") + KVFS_VERSION);
  app.require_subcommand(1);
  app.footer(
      "MOUNT must be the mount point of a kvfs volume (fstype fuse.kvfs in "
      "/proc/self/mountinfo).\nExit status: 0 success, 1 the operation failed (for prefetch: "
      "at least one PATH), 2 usage error, 3 MOUNT is not a kvfs mount point.");

  std::string mount;
  bool json = false, bytes = false;
  double watch_s = 0;
  std::vector<std::string> paths;

  CLI::App* stats = app.add_subcommand("stats", "Print statistics as a table (or JSON)");
  stats->add_option("MOUNT", mount, "kvfs mount point")->required();
  CLI::Option* watch =
      stats
          ->add_option("-w,--watch", watch_s,
                       "Refresh every SECONDS (default 2) with rates per second, until "
                       "interrupted")
          ->expected(0, 1)
          ->default_str("2")
          ->check(CLI::Range(0.05, 86400.0));
  stats->add_flag("--json", json, "Print the JSON document (with --watch: one line per refresh)");

  CLI::App* df = app.add_subcommand("df", "Size, used, free space and largest free extent");
  df->add_option("MOUNT", mount, "kvfs mount point")->required();
  df->add_flag("-b,--bytes", bytes, "Exact byte counts instead of df -h units");

  unsigned to_pct = 0;
  CLI::App* evict = app.add_subcommand(
      "evict", "Evict least recently used files now, down to PERCENT of the data space used");
  evict->add_option("MOUNT", mount, "kvfs mount point")->required();
  evict->add_option("--to", to_pct, "Percent of the data space to be used at most, 0 to 100")
      ->required()
      ->check(CLI::Range(0u, 100u));

  CLI::App* prefetch = app.add_subcommand(
      "prefetch", "Start reading files or directories (each file in it) into the RAM cache");
  prefetch->add_option("MOUNT", mount, "kvfs mount point")->required();
  prefetch->add_option("PATH", paths, "Files or directories under MOUNT")->required();

  CLI::App* drop =
      app.add_subcommand("drop-cache", "Write out staged data, then empty the RAM cache");
  drop->add_option("MOUNT", mount, "kvfs mount point")->required();

  CLI::App* flush =
      app.add_subcommand("flush", "Write out staged data and make everything durable (like sync)");
  flush->add_option("MOUNT", mount, "kvfs mount point")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help or version (rc 0) or the error
    return rc == 0 ? kExitOk : kExitUsage;
  }
  // No exception is expected below (JSON is parsed without them); one that
  // comes anyway (bad_alloc) is still one line and a failure, not abort().
  try {
    if (stats->parsed()) {
      const bool watching = watch->count() > 0;
      if (watching && watch_s == 0) watch_s = 2;  // --watch without SECONDS
      return Stats(mount, json, watching, watch_s);
    }
    if (df->parsed()) return Df(mount, bytes);
    if (evict->parsed()) return Evict(mount, to_pct);
    if (prefetch->parsed()) return Prefetch(mount, paths);
    if (drop->parsed()) return Write(mount, "drop_cache");
    if (flush->parsed()) return Write(mount, "sync");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvfsctl: %s\n", e.what());
    return kExitFailed;
  }
  return kExitUsage;
}
