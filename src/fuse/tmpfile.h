// FUSE_TMPFILE: open(dir, O_TMPFILE) as the kernel sends it (Linux 6.1+),
// answered by libfuse's create path.
//
// The kernel sends O_TMPFILE as opcode 51 with CREATE's arguments
// (fuse_create_in, then the name of the VFS's placeholder dentry, "/") and
// expects CREATE's answer (fuse_entry_out + fuse_open_out). libfuse 3.14
// has no handler for opcode 51: it answers ENOSYS and the caller gets
// EOPNOTSUPP. Both transports see each request before libfuse does, so
// they turn a TMPFILE into a CREATE of the name kTmpfileName in place
// (TmpfileAsCreate) and ops::Create answers it with an unnamed file
// (fs::FileSystem::CreateUnnamed): entry and open, as for any create. No
// real CREATE can carry that name (the kernel never sends a name with a
// '/'), so the mark cannot be mistaken.
//
// The request counters (fuse/op_counters.h) count it before the rewrite,
// as "tmpfile".
//
// Thread safety: any thread; TmpfileAsCreate touches only `buf`.
#pragma once

#include <fuse_lowlevel.h>

#include <cstring>

namespace kvfs::fuse {

// The name a TMPFILE reaches ops::Create with.
inline constexpr char kTmpfileName[] = "/";
inline bool IsTmpfileName(const char* name) { return std::strcmp(name, kTmpfileName) == 0; }

// If `buf` (a whole request in memory, as the transports give it to
// libfuse) is a FUSE_TMPFILE, rewrites it in place into a FUSE_CREATE of
// kTmpfileName (its fuse_create_in unchanged) and returns true. A TMPFILE
// too short to hold its arguments is left alone (libfuse answers ENOSYS).
bool TmpfileAsCreate(fuse_buf& buf);

}  // namespace kvfs::fuse
