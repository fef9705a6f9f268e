// Clearing setuid/setgid bits when an unprivileged caller changes a file,
// as Linux's file_remove_privs() does on a local filesystem (the kernel's
// setattr_should_drop_suidgid()): S_ISUID always; S_ISGID when
// group-execute is set, or when the caller is not in the file's group
// (without group-execute the bit marks mandatory locking, which only a
// member of the group may keep). Regular files only.
//
// Pure functions and a plain struct; the caller holds the inode's lock for
// the change.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>

namespace kvfs::fs {

// The caller of a change by someone without CAP_FSETID (kvfs takes every
// uid but 0 for that, as fuse/ does): a write, a truncate, an O_TRUNC
// open, or a mode change. Borrowed for the one call.
struct KillPriv {
  // Whether the caller is in group `gid` (its fsgid or a supplementary
  // group). Asked only when the answer decides (a file with S_ISGID and
  // no group-execute), so it may be costly (fuse/ reads /proc). Null: in
  // no group.
  std::function<bool(uint32_t gid)> in_group;
  // Out: the call cleared a bit. What the kernel has cached of the inode's
  // attributes is then stale (fuse/ tells it).
  bool mode_changed = false;
};

// `mode` with the bits an unprivileged write, truncate or chown clears,
// for a caller in the file's group or not.
constexpr uint32_t KillSuidGid(uint32_t mode, bool in_group = true) {
  if ((mode & S_IFMT) != S_IFREG) return mode;
  uint32_t kill = S_ISUID;
  if ((mode & S_IXGRP) || !in_group) kill |= S_ISGID;
  return mode & ~kill;
}

// KillSuidGid of an inode with `mode` and group `gid` for `who`; asks
// who.in_group only when it decides. Sets who.mode_changed if bits go.
inline uint32_t KillSuidGidFor(uint32_t mode, uint32_t gid, KillPriv& who) {
  bool in_group = true;
  if ((mode & S_IFMT) == S_IFREG && (mode & (S_ISGID | S_IXGRP)) == S_ISGID) {
    in_group = who.in_group && who.in_group(gid);
  }
  const uint32_t out = KillSuidGid(mode, in_group);
  if (out != mode) who.mode_changed = true;
  return out;
}

}  // namespace kvfs::fs
