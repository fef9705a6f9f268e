// Extended attributes of inodes: the rules (fs/xattr.h) applied to the
// live record, whose next capture commits them in order with the inode's
// other changes.
#include "fs/file_system_impl.h"
#include "fs/xattr.h"

namespace kvfs::fs {

namespace {

// trusted.* is for CAP_SYS_ADMIN; the kernel checks it before asking, and
// uid 0 stands for it here.
bool Privileged(const Caller& c) { return c.uid == 0; }

}  // namespace

Status FileSystem::Impl::SetXattr(uint64_t ino, std::string_view name, std::string_view value,
                                  int flags, const Caller& caller) {
  if (xattr::IsNeverStored(name)) {
    return Status::Error(EOPNOTSUPP, std::string(name) + ": kvfs keeps no such attributes");
  }
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  {
    MutexLock l(i->mu());
    if (i->deleted) return Status::Error(ENOENT, "setxattr of a removed inode");
    KVFS_RETURN_IF_ERROR(xattr::Set(i->rec.xattrs, name, value, flags, Privileged(caller)));
    i->rec.ctime_ns = NowNs();
  }
  EnqueueRecord(i);
  return Status::OK();
}

Result<std::string> FileSystem::Impl::GetXattr(uint64_t ino, std::string_view name,
                                               const Caller& caller) {
  // Asked around writes (security.capability): answered without the inode.
  if (xattr::IsNeverStored(name)) return Status::Error(ENODATA, std::string(name));
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  MutexLock l(i->mu());
  return xattr::Get(i->rec.xattrs, name, Privileged(caller));
}

Result<std::string> FileSystem::Impl::ListXattr(uint64_t ino, const Caller& caller) {
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  MutexLock l(i->mu());
  return xattr::List(i->rec.xattrs, Privileged(caller));
}

Status FileSystem::Impl::RemoveXattr(uint64_t ino, std::string_view name, const Caller& caller) {
  if (xattr::IsNeverStored(name)) return Status::Error(ENODATA, std::string(name));
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  {
    MutexLock l(i->mu());
    if (i->deleted) return Status::Error(ENOENT, "removexattr of a removed inode");
    KVFS_RETURN_IF_ERROR(xattr::Remove(i->rec.xattrs, name, Privileged(caller)));
    i->rec.ctime_ns = NowNs();
  }
  EnqueueRecord(i);
  return Status::OK();
}

}  // namespace kvfs::fs
