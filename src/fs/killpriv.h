// Clearing setuid/setgid bits when an unprivileged caller changes a file,
// as Linux's file_remove_privs() and the kernel's FUSE_HANDLE_KILLPRIV_V2
// contract ask: S_ISUID always, S_ISGID only with group-execute (without
// it the bit marks mandatory locking and stays). Regular files only.
//
// A pure function; the caller holds the inode's lock for the change.
#pragma once

#include <sys/stat.h>

#include <cstdint>

namespace kvfs::fs {

// `mode` with the bits an unprivileged write, truncate or chown clears.
constexpr uint32_t KillSuidGid(uint32_t mode) {
  if ((mode & S_IFMT) != S_IFREG) return mode;
  uint32_t kill = S_ISUID;
  if (mode & S_IXGRP) kill |= S_ISGID;
  return mode & ~kill;
}

}  // namespace kvfs::fs
