#include "ctl/control_mount.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

namespace kvfs::ctl {

namespace {

constexpr std::string_view kKvfsFsType = "fuse.kvfs";
constexpr std::string_view kControlDir = ".kvfs";

bool IsOctal(char c) { return c >= '0' && c <= '7'; }

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && IsOctal(s[i + 1]) && IsOctal(s[i + 2]) &&
        IsOctal(s[i + 3])) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// True when `mp` is `path` or one of its ancestors.
bool Holds(const std::string& mp, const std::string& path) {
  if (mp == "/") return true;
  return path == mp ||
         (path.size() > mp.size() && path.compare(0, mp.size(), mp) == 0 && path[mp.size()] == '/');
}

Result<std::string> RealPath(const std::string& path) {
  std::unique_ptr<char, decltype(&std::free)> r(::realpath(path.c_str(), nullptr), &std::free);
  if (!r) return Status::FromErrno(path);
  return std::string(r.get());
}

Status NotKvfs(const std::string& message) { return Status::Error(EMEDIUMTYPE, message); }

}  // namespace

Result<MountEntry> MountHolding(const std::string& real_path) {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return Status::FromErrno("/proc/self/mountinfo");
  MountEntry best;
  bool found = false;
  std::string line;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string w; fields >> w;) f.push_back(std::move(w));
    size_t sep = 6;
    while (sep < f.size() && f[sep] != "-") ++sep;
    if (f.size() < 5 || sep + 2 >= f.size()) continue;
    MountEntry e{Unescape(f[4]), f[sep + 1], Unescape(f[sep + 2])};
    // ">=": of mounts stacked on one point, the last one is visible.
    if (Holds(e.mount_point, real_path) &&
        (!found || e.mount_point.size() >= best.mount_point.size())) {
      best = std::move(e);
      found = true;
    }
  }
  if (!found) return Status::Error(ENOENT, "no mount holds " + real_path);
  return best;
}

Result<ControlMount> ControlMount::Open(const std::string& path) {
  KVFS_ASSIGN_OR_RETURN(std::string real, RealPath(path));
  struct stat st;
  if (::stat(real.c_str(), &st) != 0) return Status::FromErrno(path);
  if (!S_ISDIR(st.st_mode)) return Status::Error(ENOTDIR, path);
  KVFS_ASSIGN_OR_RETURN(MountEntry e, MountHolding(real));
  if (e.mount_point != real) {
    if (e.fstype == kKvfsFsType) {
      return NotKvfs(path + " is not a kvfs mount point but a directory inside the kvfs mount at " +
                     e.mount_point + "; name the mount point");
    }
    return NotKvfs(path + " is not a kvfs mount: not a mount point (it is on " + e.fstype +
                   " mounted at " + e.mount_point + ", per /proc/self/mountinfo)");
  }
  if (e.fstype != kKvfsFsType) {
    return NotKvfs(path + " is not a kvfs mount: /proc/self/mountinfo gives fstype " + e.fstype +
                   ", not fuse.kvfs");
  }
  ControlMount m(std::move(e));
  const std::string stats = m.ControlPath("stats");
  if (::stat(stats.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return NotKvfs(path + " is a fuse.kvfs mount without the control file " + stats +
                     " (a kvfs daemon older than kvfsctl?)");
    }
    return Status::FromErrno(stats);
  }
  return m;
}

std::string ControlMount::ControlPath(std::string_view name) const {
  std::string p = entry_.mount_point;
  p += '/';
  p += kControlDir;
  p += '/';
  p += name;
  return p;
}

Result<std::string> ControlMount::ReadControl(std::string_view name) const {
  const std::string path = ControlPath(name);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(path);
  std::string out;
  char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      Status st = Status::FromErrno(path);
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status ControlMount::WriteControl(std::string_view name, std::string_view data) const {
  const std::string path = ControlPath(name);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    Status st = Status::FromErrno(path);
    if (st.code() == EACCES && ::geteuid() != 0) {
      return Status::Error(EACCES, path + " (writing control files needs root)");
    }
    return st;
  }
  ssize_t n;
  do {
    n = ::write(fd, data.data(), data.size());
  } while (n < 0 && errno == EINTR);
  Status st = n < 0 ? Status::FromErrno(path) : Status::OK();
  if (st.ok() && static_cast<size_t>(n) != data.size()) {
    st = Status::Error(EIO, path + ": short write");
  }
  if (::close(fd) != 0 && st.ok()) st = Status::FromErrno(path);
  return st;
}

Result<std::string> ControlMount::NameInMount(const std::string& path) const {
  KVFS_ASSIGN_OR_RETURN(std::string real, RealPath(path));
  const std::string& mp = entry_.mount_point;
  if (real == mp) return std::string(".");
  if (!Holds(mp, real)) {
    return Status::Error(EXDEV, path + " is outside the kvfs mount " + mp);
  }
  std::string name = real.substr(mp.size() + 1);
  if (name == kControlDir || name.compare(0, kControlDir.size() + 1, ".kvfs/") == 0) {
    return Status::Error(EINVAL, path + ": in the control directory");
  }
  return name;
}

std::string Describe(const Status& st) {
  if (st.code() == EMEDIUMTYPE || st.code() == EXDEV) return st.context();
  return st.ToString();
}

}  // namespace kvfs::ctl
