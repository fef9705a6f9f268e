#include "fs/access.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace kvfs::fs {

bool CallerInGroup(const Caller& caller, uint32_t gid) {
  return caller.gid == gid ||
         std::find(caller.groups.begin(), caller.groups.end(), gid) != caller.groups.end();
}

Status CheckAccess(uint32_t mode, uint32_t uid, uint32_t gid, const Caller& caller, int want) {
  want &= kMayRead | kMayWrite | kMayExec;
  if (caller.uid == 0) {
    // CAP_DAC_OVERRIDE: everything but executing a file nobody may execute.
    const bool dir = (mode & S_IFMT) == S_IFDIR;
    if (!(want & kMayExec) || dir || (mode & (S_IXUSR | S_IXGRP | S_IXOTH))) return Status::OK();
    return Status::Error(EACCES, "no execute bit set");
  }
  uint32_t granted;
  if (caller.uid == uid) {
    granted = (mode >> 6) & 7;
  } else if (CallerInGroup(caller, gid)) {
    granted = (mode >> 3) & 7;
  } else {
    granted = mode & 7;
  }
  if ((granted & static_cast<uint32_t>(want)) == static_cast<uint32_t>(want)) return Status::OK();
  char octal[8];
  std::snprintf(octal, sizeof(octal), "%04o", mode & 07777);
  return Status::Error(EACCES, "uid " + std::to_string(caller.uid) + " lacks permission (mode " +
                                   octal + ")");
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
