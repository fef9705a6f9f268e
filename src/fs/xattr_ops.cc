// Extended attributes of inodes: the rules (fs/xattr.h) applied to the
// live record, whose next capture commits them in order with the inode's
// other changes.
#include "fs/access.h"
#include "fs/file_system_impl.h"
#include "fs/xattr.h"

namespace kvfs::fs {

namespace {

// trusted.* is for CAP_SYS_ADMIN; the kernel checks it before asking, and
// uid 0 stands for it here.
bool Privileged(const Caller& c) { return c.uid == 0; }

// CheckXattr for `check` (null: nothing).
Status MayXattrLocked(const InodeState& i, std::string_view name, bool write,
                      const Caller* check) REQUIRES(i.mu()) {
  if (check == nullptr) return Status::OK();
  return CheckXattr(i.rec.mode, i.rec.uid, i.rec.gid, name, write, *check);
}

}  // namespace

Status FileSystem::Impl::SetXattr(uint64_t ino, std::string_view name, std::string_view value,
                                  int flags, const Caller& caller, const Caller* check) {
  if (xattr::IsNeverStored(name)) {
    return Status::Error(EOPNOTSUPP, std::string(name) + ": kvfs keeps no such attributes");
  }
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  {
    MutexLock l(i->mu());
    KVFS_RETURN_IF_ERROR(MayXattrLocked(*i, name, /*write=*/true, check));
    if (i->deleted) return Status::Error(ENOENT, "setxattr of a removed inode");
    KVFS_RETURN_IF_ERROR(xattr::Set(i->rec.xattrs, name, value, flags, Privileged(caller)));
    i->rec.ctime_ns = NowNs();
  }
  EnqueueRecord(i);
  return Status::OK();
}

Result<std::string> FileSystem::Impl::GetXattr(uint64_t ino, std::string_view name,
                                               const Caller& caller, const Caller* check) {
  // Asked around writes (security.capability): answered without the inode.
  if (xattr::IsNeverStored(name)) return Status::Error(ENODATA, std::string(name));
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  MutexLock l(i->mu());
  KVFS_RETURN_IF_ERROR(MayXattrLocked(*i, name, /*write=*/false, check));
  return xattr::Get(i->rec.xattrs, name, Privileged(caller));
}

Result<std::string> FileSystem::Impl::ListXattr(uint64_t ino, const Caller& caller) {
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  MutexLock l(i->mu());
  return xattr::List(i->rec.xattrs, Privileged(caller));
}

Status FileSystem::Impl::RemoveXattr(uint64_t ino, std::string_view name, const Caller& caller,
                                     const Caller* check) {
  if (xattr::IsNeverStored(name)) return Status::Error(ENODATA, std::string(name));
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  {
    MutexLock l(i->mu());
    KVFS_RETURN_IF_ERROR(MayXattrLocked(*i, name, /*write=*/true, check));
    if (i->deleted) return Status::Error(ENOENT, "removexattr of a removed inode");
    KVFS_RETURN_IF_ERROR(xattr::Remove(i->rec.xattrs, name, Privileged(caller)));
    i->rec.ctime_ns = NowNs();
  }
  EnqueueRecord(i);
  return Status::OK();
}

}  // namespace kvfs::fs
