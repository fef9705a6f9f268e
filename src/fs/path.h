// Names and paths: the one set of syntax rules fs/ applies to them.
//
// A name is one directory entry (POSIX calls: Lookup, Create, Unlink, ...);
// a path is names joined by '/', relative to a starting directory (the
// batch ioctl's entries, the control file's prefetch list, ResolvePath),
// like openat(2) with a relative path.
//
//   input                          CheckName      SplitPath
//   ""                             EINVAL         EINVAL
//   "a/b" (a '/' inside a name)    EINVAL         two components
//   "/a" (absolute)                EINVAL         EXDEV  (it escapes)
//   "a//b", "a/" (empty component) -              EINVAL
//   "." as a component             (caller: 1)    EINVAL
//   ".." as a component            (caller: 1)    EXDEV  (it escapes)
//   a NUL byte                     EINVAL         EINVAL
//   a name over 255 bytes          ENAMETOOLONG   ENAMETOOLONG
//   a path over 4096 bytes         -              ENAMETOOLONG
//
// (1) "." and ".." are valid names of a directory; each POSIX call gives
// its own answer for them (Lookup resolves them, MkDir says EEXIST, RmDir
// EINVAL/ENOTEMPTY, Rename EINVAL), as Linux does.
// For a path, the first bad component decides, from the left; the length
// of the whole path is checked first.
#pragma once

#include <cerrno>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/format.h"
#include "common/status.h"

namespace kvfs::fs {

// Bytes of a whole path; the batch ABI's KVFS_PATH_MAX (include/kvfs/ioctl.h).
inline constexpr size_t kMaxPathLen = 4096;

// OK, or the errno of the table above for one name.
inline Status CheckName(std::string_view name) {
  if (name.size() > kMaxNameLen) {
    return Status::Error(ENAMETOOLONG, "name of " + std::to_string(name.size()) + " bytes");
  }
  if (name.empty() || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    return Status::Error(EINVAL, "invalid name");
  }
  return Status::OK();
}

inline bool IsDotName(std::string_view name) { return name == "." || name == ".."; }

// Appends the components of `path` to *parts (views into `path`), or
// returns the errno of the table above; *parts may then hold a prefix.
inline Status SplitPath(std::string_view path, std::vector<std::string_view>* parts) {
  if (path.size() > kMaxPathLen) return Status::Error(ENAMETOOLONG, "path over 4096 bytes");
  if (path.empty()) return Status::Error(EINVAL, "empty path");
  if (path.front() == '/') return Status::Error(EXDEV, "absolute path");
  for (;;) {
    const size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    if (part == "..") return Status::Error(EXDEV, "'..' in a path");
    if (part.empty() || part == ".") return Status::Error(EINVAL, "empty or '.' path component");
    if (part.size() > kMaxNameLen) {
      return Status::Error(ENAMETOOLONG,
                           "path component of " + std::to_string(part.size()) + " bytes");
    }
    if (part.find('\0') != std::string_view::npos) return Status::Error(EINVAL, "NUL in a path");
    parts->push_back(part);
    if (slash == std::string_view::npos) return Status::OK();
    path.remove_prefix(slash + 1);
  }
}

}  // namespace kvfs::fs
