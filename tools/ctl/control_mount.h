// ControlMount: a mounted kvfs volume as kvfsctl sees it, through its
// control directory MOUNT/.kvfs/ (src/fuse/control.h): read `stats`, write
// `drop_cache`, `prefetch`, `sync`.
//
//   KVFS_ASSIGN_OR_RETURN(ControlMount m, ControlMount::Open("/mnt/kv"));
//   KVFS_ASSIGN_OR_RETURN(std::string json, m.ReadControl("stats"));
//
// Which directories are kvfs mounts is decided by /proc/self/mountinfo: the
// path must be a mount point whose fstype is "fuse.kvfs" (what the daemon
// and mount.fuse3 -t fuse.kvfs both register), and its .kvfs directory must
// answer. Open() fails with EMEDIUMTYPE and a full sentence as context when
// the path is not such a mount point (an ordinary directory, another
// filesystem, a directory inside a kvfs mount); with the path's own errno
// when it cannot be reached (ENOENT, ENOTDIR, ENOTCONN for a FUSE mount
// whose daemon is gone).
//
// Thread safety: a value; const methods may run concurrently.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace kvfs::ctl {

// A mounted filesystem, from one line of /proc/self/mountinfo.
struct MountEntry {
  std::string mount_point;  // unescaped (\040 -> ' ')
  std::string fstype;       // "fuse.kvfs", "ext4", ...
  std::string source;       // the image or device for kvfs
};

// The mount that holds the absolute, symlink-free path `real_path` (the
// longest mount point that is a prefix of it; the last one mounted when
// several are stacked). ENOENT when mountinfo names none (not expected: "/"
// holds everything); the errno of reading /proc/self/mountinfo.
Result<MountEntry> MountHolding(const std::string& real_path);

class ControlMount {
 public:
  // Checks that `path` is the mount point of a kvfs volume (see above).
  static Result<ControlMount> Open(const std::string& path);

  // The mount point, absolute and symlink-free.
  const std::string& mount_point() const { return entry_.mount_point; }
  // What is mounted: the first device or image file.
  const std::string& source() const { return entry_.source; }
  // MOUNT/.kvfs/NAME.
  std::string ControlPath(std::string_view name) const;

  // The whole content of a readable control file (stats, metrics): one
  // snapshot, as the daemon makes it at open. errno of open/read.
  Result<std::string> ReadControl(std::string_view name) const;
  // One write(2) of `data` to a writable control file (drop_cache, sync,
  // prefetch); returns what the daemon answered: its errno, EACCES for a
  // caller that is not root.
  Status WriteControl(std::string_view name, std::string_view data) const;

  // The name the prefetch control file takes for `path` (absolute, or
  // relative to the current directory): its place relative to the mount
  // point, "." for the mount point itself. Fails with the errno of
  // resolving `path` (ENOENT ...); EXDEV when it lies outside this mount;
  // EINVAL for a name inside .kvfs/.
  Result<std::string> NameInMount(const std::string& path) const;

 private:
  explicit ControlMount(MountEntry e) : entry_(std::move(e)) {}
  MountEntry entry_;
};

// One line for the user: the context alone for the errors above whose
// context is a whole sentence (EMEDIUMTYPE, EXDEV), else ToString().
std::string Describe(const Status& st);

}  // namespace kvfs::ctl
