#include "fs/access.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace kvfs::fs {

bool CallerInGroup(const Caller& caller, uint32_t gid) {
  if (caller.gid == gid) return true;
  if (caller.in_group) return caller.in_group(gid);
  return std::find(caller.groups.begin(), caller.groups.end(), gid) != caller.groups.end();
}

Status CheckAccess(uint32_t mode, uint32_t uid, uint32_t gid, const Caller& caller, int want) {
  want &= kMayRead | kMayWrite | kMayExec;
  if (want == 0) return Status::OK();
  if (caller.uid == 0) {
    // CAP_DAC_OVERRIDE: everything but executing a file nobody may execute.
    const bool dir = (mode & S_IFMT) == S_IFDIR;
    if (!(want & kMayExec) || dir || (mode & (S_IXUSR | S_IXGRP | S_IXOTH))) return Status::OK();
    return Status::Error(EACCES, "no execute bit set");
  }
  const uint32_t w = static_cast<uint32_t>(want);
  uint32_t granted;
  if (caller.uid == uid) {
    granted = (mode >> 6) & 7;
  } else if (((mode >> 3) & w) == (mode & w)) {
    granted = mode & 7;  // the group's bits say the same: no need to know
  } else if (CallerInGroup(caller, gid)) {
    granted = (mode >> 3) & 7;
  } else {
    granted = mode & 7;
  }
  if ((granted & w) == w) return Status::OK();
  char octal[8];
  std::snprintf(octal, sizeof(octal), "%04o", mode & 07777);
  return Status::Error(EACCES, "uid " + std::to_string(caller.uid) + " lacks permission (mode " +
                                   octal + ")");
}

int WantOfOpen(int flags) {
  int want;
  switch (flags & O_ACCMODE) {
    case O_RDONLY:
      want = kMayRead;
      break;
    case O_WRONLY:
      want = kMayWrite;
      break;
    default:
      want = kMayRead | kMayWrite;
      break;
  }
  if (flags & O_TRUNC) want |= kMayWrite;
  if (flags & kOpenForExec) want |= kMayExec;
  return want;
}

Status CheckSticky(uint32_t dir_mode, uint32_t dir_uid, uint32_t victim_uid,
                   const Caller& caller) {
  if (!(dir_mode & S_ISVTX) || caller.uid == 0 || caller.uid == dir_uid ||
      caller.uid == victim_uid) {
    return Status::OK();
  }
  return Status::Error(EPERM, "sticky directory: not the owner of the entry or the directory");
}

}  // namespace kvfs::fs
