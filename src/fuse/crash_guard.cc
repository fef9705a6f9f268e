#include "fuse/crash_guard.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace kvfs::fuse {

namespace {

constexpr const char* kConnections = "/sys/fs/fuse/connections";
constexpr int kPipeFd = 3;  // where the guard finds the pipe's read end

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string oct = s.substr(i + 1, 3);
      if (oct.find_first_not_of("01234567") == std::string::npos) {
        out += static_cast<char>(std::strtol(oct.c_str(), nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

bool FusectlMounted() {
  std::ifstream in("/proc/self/mounts");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string src, where, type;
    f >> src >> where >> type;
    if (type == "fusectl" && where == kConnections) return true;
  }
  return false;
}

// Mounts fusectl where the abort files live, if it is not (root only).
void MountFusectl() {
  if (mount("fusectl", kConnections, "fusectl", 0, nullptr) != 0 && errno != EBUSY) {
    spdlog::debug("crash guard: mounting fusectl at {}: {}", kConnections, std::strerror(errno));
  }
}

// The guard's action: ends the connection (if it has not ended already).
void Abort(const char* abort_file) {
  int fd = open(abort_file, O_WRONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && !FusectlMounted() && geteuid() == 0) {
    MountFusectl();
    fd = open(abort_file, O_WRONLY | O_CLOEXEC);
  }
  if (fd < 0) return;  // gone: the connection ended by itself
  ssize_t n = write(fd, "1", 1);
  (void)n;
  close(fd);
}

void NoOp(int) {}

// Whether thread `tid` (of process `tid`: its main thread) still runs:
// neither gone nor a zombie waiting for the rest of its process.
bool ThreadAlive(pid_t tid) {
  const std::string path = "/proc/" + std::to_string(tid) + "/task/" + std::to_string(tid) +
                           "/stat";
  std::ifstream in(path);
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace

std::string FuseConnectionOf(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line, found;
  while (std::getline(in, line)) {
    // id parent major:minor root mountpoint options [optional...] - fstype source super
    std::istringstream f(line);
    std::string id, parent, dev, root, where;
    f >> id >> parent >> dev >> root >> where;
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string type;
    tail >> type;
    if (type.rfind("fuse", 0) != 0 || Unescape(where) != mountpoint) continue;
    const size_t colon = dev.find(':');
    if (colon == std::string::npos) continue;
    const unsigned long major = std::strtoul(dev.substr(0, colon).c_str(), nullptr, 10);
    const unsigned long minor = std::strtoul(dev.substr(colon + 1).c_str(), nullptr, 10);
    // fusectl names a connection by the kernel's dev_t (MKDEV: 12 bits of
    // major above 20 of minor); the last mount there is the newest.
    found = std::to_string((major << 20) | minor);
  }
  return found;
}

CrashGuard& CrashGuard::operator=(CrashGuard&& o) noexcept {
  if (this != &o) {
    Disarm();
    pid_ = o.pid_;
    fd_ = o.fd_;
    o.pid_ = -1;
    o.fd_ = -1;
  }
  return *this;
}

CrashGuard CrashGuard::Start(const std::string& mountpoint) {
  CrashGuard g;
  const std::string conn = FuseConnectionOf(mountpoint);
  if (conn.empty()) {
    spdlog::warn("crash guard off: no FUSE mount at {} in /proc/self/mountinfo", mountpoint);
    return g;
  }
  const std::string abort_file = std::string(kConnections) + "/" + conn + "/abort";
  if (access(abort_file.c_str(), W_OK) != 0 && errno == ENOENT && geteuid() == 0) {
    MountFusectl();
  }
  if (access(abort_file.c_str(), W_OK) != 0) {
    spdlog::info("crash guard off: {}: {}; if kvfs is killed while a client holds a directory "
                 "it notifies the kernel about, that client waits until the connection is "
                 "aborted (echo 1 > {})",
                 abort_file, std::strerror(errno), abort_file);
    return g;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    spdlog::warn("crash guard off: pipe: {}", std::strerror(errno));
    return g;
  }
  // Everything the child uses is made before vfork: it only calls prctl,
  // dup2/fcntl and execv, in memory it shares with this process.
  const std::string parent = std::to_string(getpid());
  char arg0[] = "kvfs";
  char arg1[] = "--crash-guard";
  std::vector<char> arg2(parent.begin(), parent.end()), arg3(abort_file.begin(), abort_file.end());
  arg2.push_back('\0');
  arg3.push_back('\0');
  char* argv[] = {arg0, arg1, arg2.data(), arg3.data(), nullptr};
  const int read_end = fds[0];
  // SIGUSR2 blocked from before the child exists until the guard waits for
  // it: a death signal sent before the guard's handler is in place stays
  // pending (across exec) instead of killing the guard.
  sigset_t usr2, old_mask;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &usr2, &old_mask);
  pid_t pid = vfork();
  if (pid == 0) {
    // The thread that called vfork is the "parent" whose exit signals.
    prctl(PR_SET_PDEATHSIG, SIGUSR2);
    if (read_end == kPipeFd) {
      fcntl(kPipeFd, F_SETFD, 0);
    } else {
      dup2(read_end, kPipeFd);
    }
    // This very binary, even if its path was replaced since it started.
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  close(fds[0]);
  if (pid < 0) {
    spdlog::warn("crash guard off: vfork: {}", std::strerror(errno));
    close(fds[1]);
    return g;
  }
  g.pid_ = pid;
  g.fd_ = fds[1];
  spdlog::debug("crash guard: process {} aborts {} if kvfs dies", pid, abort_file);
  return g;
}

void CrashGuard::Disarm() {
  if (pid_ <= 0) return;
  ssize_t n = write(fd_, "q", 1);
  (void)n;  // if it is gone already, so much the better
  close(fd_);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  fd_ = -1;
}

void CrashGuard::Leave() {
  pid_ = -1;
  fd_ = -1;  // left open: its end of file would fire the guard now
}

int CrashGuard::Main(int argc, char** argv) {
  if (argc != 3) return 2;
  const pid_t parent = static_cast<pid_t>(std::strtol(argv[1], nullptr, 10));
  const char* abort_file = argv[2];
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
    if (null > 2 && null != kPipeFd) close(null);
  }
  close_range(kPipeFd + 1, ~0U, 0);
  prctl(PR_SET_NAME, "kvfs-guard");
  // Again: an exec that gained privileges (file capabilities) cleared it.
  prctl(PR_SET_PDEATHSIG, SIGUSR2);
  // Opened now, while the number names this connection: once it ended,
  // the number may name a new mount's, which must not be aborted (a write
  // to the file of an ended connection does nothing).
  const int abort_fd = open(abort_file, O_WRONLY | O_CLOEXEC);
  // SIGUSR2 (the parent thread's exit) is taken only inside ppoll, so it
  // cannot fall between a check and the wait. The termination signals stay
  // blocked as the daemon left them: the guard ends with the daemon.
  struct sigaction sa {};
  sa.sa_handler = NoOp;
  sigaction(SIGUSR2, &sa, nullptr);
  sigset_t blocked, during_wait;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGUSR2);
  sigprocmask(SIG_BLOCK, &blocked, &during_wait);
  sigdelset(&during_wait, SIGUSR2);
  // Else the daemon, or the thread that started the guard, died before
  // PR_SET_PDEATHSIG held (a dead thread's children go to another thread of
  // its process, so getppid() alone cannot tell).
  if (getppid() == parent && ThreadAlive(parent)) {
    for (;;) {
      pollfd p{kPipeFd, POLLIN, 0};
      const int rc = ppoll(&p, 1, nullptr, &during_wait);
      if (rc < 0) {
        if (errno == EINTR) break;  // SIGUSR2: the daemon's thread exited
        return 1;
      }
      char c;
      const ssize_t n = read(kPipeFd, &c, 1);
      if (n == 1) return 0;  // a clean end
      if (n == 0) break;     // every end closed: the daemon is gone
      if (errno != EINTR && errno != EAGAIN) return 1;
    }
  }
  if (abort_fd >= 0) {
    ssize_t n = write(abort_fd, "1", 1);
    (void)n;
  } else {
    Abort(abort_file);  // fusectl was not there at the start
  }
  return 0;
}

}  // namespace kvfs::fuse
