#include "fuse/route.h"

#include "fuse/control.h"
#include "fuse/ops.h"
#include "fuse/reply.h"

namespace kvfs::fuse {

namespace {

// A request about inode `ino` (the handler's second argument): control's
// handler of the same signature for a control inode, else kvfs's.
template <auto kOps, auto kControl>
struct ByInode;
template <typename... A, void (*kOps)(fuse_req_t, fuse_ino_t, A...),
          void (*kControl)(fuse_req_t, fuse_ino_t, A...)>
struct ByInode<kOps, kControl> {
  static void Handle(fuse_req_t req, fuse_ino_t ino, A... a) {
    if (control::Owns(ino)) {
      kControl(req, ino, a...);
    } else {
      kOps(req, ino, a...);
    }
  }
};

// As ByInode, for control inodes answered by an errno alone (0: OK).
template <auto kOps, int kErrno>
struct ByInodeOr;
template <typename... A, void (*kOps)(fuse_req_t, fuse_ino_t, A...), int kErrno>
struct ByInodeOr<kOps, kErrno> {
  static void Handle(fuse_req_t req, fuse_ino_t ino, A... a) {
    if (control::Owns(ino)) {
      fuse_reply_err(req, kErrno);
    } else {
      kOps(req, ino, a...);
    }
  }
};

// A namespace change of `name` in `parent` (the handler's second and third
// arguments): refused if it touches the control directory, `kExistsErrno`
// for the name `.kvfs` in the root (control::RefuseNameChange).
template <auto kOps, int kExistsErrno, const char* kOp>
struct ByName;
template <typename... A, void (*kOps)(fuse_req_t, fuse_ino_t, const char*, A...),
          int kExistsErrno, const char* kOp>
struct ByName<kOps, kExistsErrno, kOp> {
  static void Handle(fuse_req_t req, fuse_ino_t parent, const char* name, A... a) {
    Status st = control::RefuseNameChange(parent, name, kExistsErrno);
    if (!st.ok()) {
      ReplyStatus(req, st, kOp);
      return;
    }
    kOps(req, parent, name, a...);
  }
};

constexpr char kMkDir[] = "mkdir";
constexpr char kMkNod[] = "mknod";
constexpr char kRmDir[] = "rmdir";
constexpr char kUnlink[] = "unlink";
constexpr char kCreate[] = "create";

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  // The control directory shadows anything in the index of that name.
  if (control::Owns(parent) || control::IsControlName(parent, name)) {
    control::Lookup(req, parent, name);
  } else {
    ops::Lookup(req, parent, name);
  }
}

void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  // Control inodes are not counted: kvfs's are kept, in order, in place.
  size_t kept = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!control::Owns(forgets[i].ino)) forgets[kept++] = forgets[i];
  }
  ops::ForgetMulti(req, kept, forgets);
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
            const char* new_name, unsigned int flags) {
  Status st = control::RefuseNameChange(parent, name, EPERM);
  if (st.ok()) st = control::RefuseNameChange(new_parent, new_name, EPERM);
  if (!st.ok()) {
    ReplyStatus(req, st, "rename");
    return;
  }
  ops::Rename(req, parent, name, new_parent, new_name, flags);
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent, const char* new_name) {
  if (control::Owns(ino)) {
    control::Link(req, ino, new_parent, new_name);
    return;
  }
  Status st = control::RefuseNameChange(new_parent, new_name, EEXIST);
  if (!st.ok()) {
    ReplyStatus(req, st, "link");
    return;
  }
  ops::Link(req, ino, new_parent, new_name);
}

}  // namespace

void SetHandlers(fuse_lowlevel_ops& op) {
  op.lookup = Lookup;
  op.forget = ByInode<ops::Forget, control::Forget>::Handle;
  op.forget_multi = ForgetMulti;
  op.getattr = ByInode<ops::GetAttr, control::GetAttr>::Handle;
  op.setattr = ByInode<ops::SetAttr, control::SetAttr>::Handle;
  op.mkdir = ByName<ops::MkDir, EEXIST, kMkDir>::Handle;
  op.mknod = ByName<ops::MkNod, EEXIST, kMkNod>::Handle;
  op.rmdir = ByName<ops::RmDir, EPERM, kRmDir>::Handle;
  op.unlink = ByName<ops::Unlink, EPERM, kUnlink>::Handle;
  op.rename = Rename;
  op.access = ByInode<ops::Access, control::Access>::Handle;
  op.link = Link;
  op.symlink = ops::Symlink;  // refused everywhere
  op.create = ByName<ops::Create, EEXIST, kCreate>::Handle;
  op.open = ByInode<ops::Open, control::Open>::Handle;
  op.read = ByInode<ops::Read, control::Read>::Handle;
  op.write = ByInode<ops::Write, control::Write>::Handle;
  op.flush = ByInode<ops::Flush, control::Flush>::Handle;
  op.release = ByInode<ops::Release, control::Release>::Handle;
  op.fsync = ByInodeOr<ops::Fsync, 0>::Handle;
  op.fallocate = ByInodeOr<ops::Fallocate, EPERM>::Handle;
  op.opendir = ByInode<ops::OpenDir, control::OpenDir>::Handle;
  op.readdir = ByInode<ops::ReadDir, control::ReadDir>::Handle;
  op.releasedir = ByInodeOr<ops::ReleaseDir, 0>::Handle;
  op.fsyncdir = ByInodeOr<ops::FsyncDir, 0>::Handle;
  op.statfs = ops::StatFs;  // the volume's, from any inode
  op.ioctl = ByInodeOr<ops::Ioctl, ENOTTY>::Handle;
  op.setxattr = ByInodeOr<ops::SetXattr, EOPNOTSUPP>::Handle;
  op.getxattr = ByInodeOr<ops::GetXattr, ENODATA>::Handle;
  op.listxattr = ByInode<ops::ListXattr, control::ListXattr>::Handle;
  op.removexattr = ByInodeOr<ops::RemoveXattr, ENODATA>::Handle;
}

}  // namespace kvfs::fuse
