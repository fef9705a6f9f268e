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
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/command_line.h"
#include "daemon/daemon_log.h"
#include "daemon/fault_hooks.h"
#include "fs/file_system.h"
#include "fuse/crash_guard.h"
#include "fuse/daemon.h"
#include "fuse/detach.h"
#include "fuse/passthrough.h"
#include "volume/volume.h"

namespace {

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

// Whether a kvfs mount of one of `devices` is in this mount namespace
// (its fsname= is the first device of its command line, see main(), which
// may list the devices in another order).
bool MountedHere(const std::vector<std::string>& devices) {
  FILE* f = std::fopen("/proc/self/mountinfo", "re");
  if (f == nullptr) return false;
  char* line = nullptr;
  size_t cap = 0;
  bool found = false;
  while (!found && getline(&line, &cap, f) > 0) {
    // ... - FSTYPE SOURCE OPTIONS
    const char* sep = std::strstr(line, " - ");
    if (sep == nullptr) continue;
    char type[256], source[PATH_MAX];
    if (std::sscanf(sep + 3, "%255s %4095s", type, source) != 2) continue;
    found = std::strcmp(type, "fuse.kvfs") == 0 &&
            std::find(devices.begin(), devices.end(), source) != devices.end();
  }
  std::free(line);
  std::fclose(f);
  return found;
}

// Volume::Open, waiting while the volume is held by a daemon that is
// ending: umount returns as soon as the kernel lets go of the mount, while
// the old daemon may still be writing out staged data and closing the
// index (seconds, with much staged). Tries again every 50 ms for up to
// `wait_s` seconds, saying once that it waits. A volume that is mounted
// (seen in /proc/self/mountinfo) is refused at once.
kvfs::Result<std::unique_ptr<kvfs::volume::Volume>> OpenVolume(
    const std::vector<std::string>& devices, const kvfs::volume::VolumeOptions& vopt,
    unsigned wait_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
  bool waited = false;
  for (;;) {
    auto v = kvfs::volume::Volume::Open(devices, vopt);
    if (v.ok()) {
      if (waited) spdlog::info("the volume was released; mounting");
      return v;
    }
    if (v.status().code() != EBUSY || std::chrono::steady_clock::now() >= deadline ||
        MountedHere(devices)) {
      return v;
    }
    if (!waited) {
      spdlog::warn("{}; waiting up to {} s for the process holding it to let go",
                   v.status().ToString(), wait_s);
      waited = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The daemon runs itself again as its crash guard (fuse/crash_guard.h).
  if (argc > 1 && std::strcmp(argv[1], "--crash-guard") == 0) {
    return kvfs::fuse::CrashGuard::Main(argc - 1, argv + 1);
  }
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  auto parsed = kvfs::daemon::ParseCommandLine(&args);
  if (!parsed.ok()) Fail(parsed.status().context());
  kvfs::daemon::CommandLine& p = *parsed;
  if (p.show_help || p.show_version || p.show_json) {
    if (p.show_json) {
      std::fputs(kvfs::daemon::MountOptionsJson().c_str(), stdout);
    } else if (p.show_help) {
      std::printf("%s\nlibfuse options:\n", kvfs::daemon::Usage().c_str());
      std::fflush(stdout);
      fuse_lowlevel_help();
    } else {
      std::printf("kvfs %s\n", KVFS_VERSION);
      std::fflush(stdout);
      fuse_lowlevel_version();
    }
    fuse_opt_free_args(&args);
    return 0;
  }
  if (p.positional.size() < 2) {
    std::fputs(kvfs::daemon::Usage().c_str(), stderr);
    return 1;
  }
  kvfs::daemon::DaemonOptions& opt = p.options;
  if (kvfs::Status st = kvfs::daemon::FinishMountOptions(opt); !st.ok()) Fail(st.context());
  auto log = kvfs::daemon::DaemonLog::Start(opt.log);
  if (!log.ok()) Fail(log.status().ToString());

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
  auto faults = kvfs::daemon::FaultHooks::Create(opt.faults, devices.size());
  if (!faults.ok()) Fail(faults.status().context());

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
  (*faults)->Install(opt.volume);
  // Per-file memory is what the kernel serves from; where it cannot
  // (passthrough=off, not root) the cache stays in chunks, as it always was.
  opt.fs.file_memory = kvfs::fuse::Passthrough(opt.mount.passthrough).may_activate();
  // The FUSE session first: bad options fail before the volume is touched.
  auto mount = kvfs::fuse::Mount::Create(opt.mount, &args);
  if (!mount.ok()) Fail(mount.status().ToString());

  std::optional<kvfs::fuse::Detacher> detacher;
  if (!p.foreground) {
    auto d = kvfs::fuse::Detacher::Fork();  // the parent exits in there
    if (!d.ok()) Fail(d.status().ToString());
    detacher.emplace(std::move(d).value());
  }

  RaiseOpenFileLimit();
  auto volume = OpenVolume(devices, opt.volume, opt.busy_wait_s);
  if (!volume.ok()) Fail(volume.status().ToString());
  (*faults)->Arm();
  // From here on, failures return (not exit) so that the volume's threads
  // stop and its index closes in the destructors.
  auto fs = kvfs::fs::FileSystem::Create(**volume, opt.fs);
  if (!fs.ok()) {
    std::fprintf(stderr, "kvfs: %s\n", fs.status().ToString().c_str());
    (*faults)->Disarm();
    return 1;
  }
  kvfs::Status mounted = (*mount)->MountAt(**fs, mountpoint);
  if (!mounted.ok()) {
    std::fprintf(stderr, "kvfs: %s\n", mounted.ToString().c_str());
    fs->reset();
    (*faults)->Disarm();
    return 1;
  }
  if (detacher) log->Detach(*detacher);
  spdlog::info("mounted {} at {}{}", devices[0], mountpoint,
               opt.fs.verify_reads ? " (verify=on)" : "");
  (*faults)->LogActive();

  kvfs::Status run = (*mount)->Run();
  mount->reset();  // unmounted; every reply sent
  if (!run.ok()) spdlog::error("{}", run.ToString());

  kvfs::Status shut = (*fs)->Shutdown();
  if (!shut.ok()) spdlog::error("writing out staged data: {}", shut.ToString());
  fs->reset();
  (*faults)->Disarm();
  volume->reset();  // the index (RocksDB) is closed, the devices unlocked
  spdlog::info("unmounted {}", mountpoint);

  fuse_opt_free_args(&args);
  return run.ok() && shut.ok() ? 0 : 1;
}
