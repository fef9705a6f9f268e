// Extended attributes: the rules for one inode's list (index::Inode::xattrs),
// with the errno Linux filesystems give for each.
//
// Namespaces:
//   user.*     stored (files and directories; the kernel checks the mode
//              bits first, with default_permissions).
//   trusted.*  stored; set, removed and listed only for a privileged caller
//              (the kernel requires CAP_SYS_ADMIN before asking).
//   user.kvfs.* reserved for kvfs's own names (user.kvfs.prefetch is a hint
//              handled in fuse/, never stored; user.kvfs.evict, "lru" or
//              "off", marks a directory's tree for eviction, stored):
//              setting another is EINVAL.
//   security.*, system.* (POSIX ACLs): never stored. Get answers ENODATA
//              and set EOPNOTSUPP at once, from the name alone, so the
//              kernel's security.capability query around writes costs no
//              inode or index lookup (IsNeverStored).
//   anything else: EOPNOTSUPP.
//
// Limits (index/records.h, which fsck checks them by): names 1..255 bytes (ERANGE past it, as the
// kernel's own check), values up to 64 KiB (E2BIG), per inode 128 KiB of
// names and values with the names' list within 64 KiB (ENOSPC).
//
// Thread safety: pure functions; the caller holds the inode's lock.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "index/records.h"

namespace kvfs::fs::xattr {

// True for names kvfs never stores (security.*, system.*): a get is
// ENODATA, a set EOPNOTSUPP, without looking at the inode.
bool IsNeverStored(std::string_view name);

// setxattr(2): flags 0, XATTR_CREATE (EEXIST if present) or XATTR_REPLACE
// (ENODATA if absent); EINVAL for other flags. `privileged`: the caller may
// use trusted.* (EPERM otherwise).
Status Set(std::vector<index::Xattr>& list, std::string_view name, std::string_view value,
           int flags, bool privileged);
// The value of `name`; ENODATA if absent (or never stored), ERANGE for a
// bad name length, EOPNOTSUPP for an unknown namespace.
Result<std::string> Get(const std::vector<index::Xattr>& list, std::string_view name,
                        bool privileged);
// listxattr(2)'s buffer: each visible name followed by a NUL (trusted.*
// only for a privileged caller), in name order.
std::string List(const std::vector<index::Xattr>& list, bool privileged);
// removexattr(2): ENODATA if absent.
Status Remove(std::vector<index::Xattr>& list, std::string_view name, bool privileged);

}  // namespace kvfs::fs::xattr
