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

Status CheckSetAttr(uint32_t mode, uint32_t uid, uint32_t gid, const SetAttrRequest& req,
                    const Caller& caller, uint32_t* chmod_mode) {
  const bool root = caller.uid == 0;
  const bool owner = root || caller.uid == uid;
  if (req.uid && !root && !(caller.uid == uid && *req.uid == uid)) {
    return Status::Error(EPERM, "chown: only root changes the owner");
  }
  if (req.gid) {
    const bool keeps_owner = !req.uid || *req.uid == uid;
    if (!root && !(caller.uid == uid && keeps_owner &&
                   (*req.gid == gid || CallerInGroup(caller, *req.gid)))) {
      return Status::Error(EPERM, "chgrp: not the owner, or not a group of the caller");
    }
  }
  if (req.mode) {
    *chmod_mode = *req.mode;
    const uint32_t now = mode & 07777, want = *req.mode & 07777;
    // The kernel clears setuid/setgid itself on a write, a truncate or a
    // chown by someone else (it computed the mode; no chmod was asked).
    const uint32_t cleared = now & ~want;
    const bool kill_only = want != now && (want & ~now) == 0 &&
                           (cleared & ~static_cast<uint32_t>(S_ISUID | S_ISGID)) == 0;
    if (!owner) {
      if (!kill_only || !CheckAccess(mode, uid, gid, caller, kMayWrite).ok()) {
        return Status::Error(EPERM, "chmod: not the owner");
      }
    } else if (!root && !kill_only && !req.size) {
      if (!CallerInGroup(caller, req.gid ? *req.gid : gid)) {
        *chmod_mode &= ~static_cast<uint32_t>(S_ISGID);
      }
    }
  }
  const bool atime = req.atime_ns || req.atime_now;
  const bool mtime = req.mtime_ns || req.mtime_now;
  if ((atime || mtime) && !owner) {
    if (!(req.atime_now && req.mtime_now)) return Status::Error(EPERM, "utimes: not the owner");
    KVFS_RETURN_IF_ERROR(CheckAccess(mode, uid, gid, caller, kMayWrite));
  }
  if (req.size && !req.with_handle) {
    KVFS_RETURN_IF_ERROR(CheckAccess(mode, uid, gid, caller, kMayWrite));
  }
  return Status::OK();
}

Status CheckXattr(uint32_t mode, uint32_t uid, uint32_t gid, std::string_view name, bool write,
                  const Caller& caller) {
  if (!name.starts_with("user.")) return Status::OK();
  return CheckUserXattr(mode, uid, gid, write, caller);
}

Status CheckUserXattr(uint32_t mode, uint32_t uid, uint32_t gid, bool write,
                      const Caller& caller) {
  if (!S_ISREG(mode) && !S_ISDIR(mode)) {
    constexpr const char* kWhy = "user.* attributes: only files and directories have them";
    return Status::Error(write ? EPERM : ENODATA, kWhy);
  }
  if (write && S_ISDIR(mode) && (mode & S_ISVTX) && caller.uid != 0 && caller.uid != uid) {
    return Status::Error(EPERM, "user.* attributes of a sticky directory: owner only");
  }
  return CheckAccess(mode, uid, gid, caller, write ? kMayWrite : kMayRead);
}

}  // namespace kvfs::fs
