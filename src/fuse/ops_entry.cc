// Names and attributes: lookup, forget, getattr, setattr, mkdir, mknod,
// rmdir, unlink, rename, link (only the one that names an O_TMPFILE file);
// symlink is refused.
#include <fcntl.h>
#include <unistd.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstring>
#include <limits>

#include "fuse/ops.h"
#include "fuse/permissions.h"
#include "fuse/reply.h"

namespace kvfs::fuse::ops {

namespace {

// An entry in a directory not everyone may search is not cached: each walk
// through it comes back as a LOOKUP, whose caller is checked.
fuse_entry_param EntryIn(const fs::Attr& attr, const CacheTimeouts& t, bool cacheable) {
  fuse_entry_param e = EntryParam(attr, t);
  if (!cacheable) e.entry_timeout = 0;
  return e;
}

// Times are kept as int64 nanoseconds since the epoch (years 1678-2262). A
// time outside is clamped to the nearest end, as kernel filesystems clamp
// to their own range (the kernel leaves that to a FUSE daemon).
int64_t ToNs(const timespec& ts) {
  int64_t ns;
  if (__builtin_mul_overflow(static_cast<int64_t>(ts.tv_sec), int64_t{1'000'000'000}, &ns) ||
      __builtin_add_overflow(ns, static_cast<int64_t>(ts.tv_nsec), &ns)) {
    return ts.tv_sec < 0 ? std::numeric_limits<int64_t>::min()
                         : std::numeric_limits<int64_t>::max();
  }
  return ns;
}

}  // namespace

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  bool cacheable = true;
  SessionState& s = StateOf(req);
  // fs/ checks search permission on `parent` first, as the kernel's walk
  // does, and says whether names in it may be cached (fuse/permissions.h).
  perm::RequestCaller who(req);
  Result<fs::Attr> r = NoThrow([&] {
    return s.fs->Lookup(parent, name, who.check(), who.check() ? &cacheable : nullptr);
  });
  if (r.ok()) {
    fuse_entry_param e = EntryIn(*r, s.timeouts, cacheable);
    fuse_reply_entry(req, &e);
    return;
  }
  if (r.status().code() == ENOENT && s.timeouts.negative_s > 0 && cacheable) {
    // A negative entry (ino 0): the kernel remembers that the name does not
    // exist, so connectors probing for missing keys cost no round trip.
    // Safe because every create of the name goes through this kernel.
    fuse_entry_param e;
    std::memset(&e, 0, sizeof(e));
    e.entry_timeout = s.timeouts.negative_s;
    fuse_reply_entry(req, &e);
    return;
  }
  ReplyStatus(req, r.status(), "lookup");
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  SessionState& s = StateOf(req);
  Status st = NoThrowVoid([&] { s.fs->Forget(ino, nlookup); });
  if (!st.ok()) spdlog::error("forget of inode {}: {}", ino, st.ToString());
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  SessionState& s = StateOf(req);
  for (size_t i = 0; i < count; ++i) {
    Status st = NoThrowVoid([&] { s.fs->Forget(forgets[i].ino, forgets[i].nlookup); });
    if (!st.ok()) spdlog::error("forget of inode {}: {}", forgets[i].ino, st.ToString());
  }
  fuse_reply_none(req);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  SessionState& s = StateOf(req);
  Result<fs::Attr> r = NoThrow([&] { return s.fs->GetAttr(ino); });
  if (!r.ok()) {
    ReplyStatus(req, r.status(), "getattr");
    return;
  }
  struct stat st = ToStat(*r);
  fuse_reply_attr(req, &st, s.timeouts.attr_s);
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  fs::SetAttrRequest q;
  if (to_set & FUSE_SET_ATTR_MODE) q.mode = attr->st_mode & 07777;
  if (to_set & FUSE_SET_ATTR_UID) q.uid = attr->st_uid;
  if (to_set & FUSE_SET_ATTR_GID) q.gid = attr->st_gid;
  if (to_set & FUSE_SET_ATTR_SIZE) q.size = static_cast<uint64_t>(attr->st_size);
  // The kernel's FATTR_KILL_SUIDGID (same bit): an unprivileged truncate,
  // or a chown, under FUSE_HANDLE_KILLPRIV_V2.
  q.kill_suidgid = (to_set & FUSE_SET_ATTR_KILL_SUID) != 0;
  fs::KillPriv who;
  q.unprivileged = UnprivilegedCaller(req, &who);
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
    q.atime_now = true;
  } else if (to_set & FUSE_SET_ATTR_ATIME) {
    q.atime_ns = ToNs(attr->st_atim);
  }
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
    q.mtime_now = true;
  } else if (to_set & FUSE_SET_ATTR_MTIME) {
    q.mtime_ns = ToNs(attr->st_mtim);
  }
  q.with_handle = fi != nullptr;
  // By inode: an ftruncate of a file with no name left finds it all the
  // same (its open handle keeps it in the table). fs/ checks the caller
  // (fuse/permissions.h).
  perm::RequestCaller caller(req);
  bool narrowed = false;
  Result<fs::Attr> r = NoThrow([&] {
    return s.fs->SetAttr(ino, q, caller.check(), caller.check() ? &narrowed : nullptr);
  });
  if (!r.ok()) {
    ReplyStatus(req, r.status(), "setattr");
    return;
  }
  // A directory that someone may no longer search: the kernel's cached
  // names under it would let a walk through without asking.
  if (narrowed) perm::DropAllNames(req);
  struct stat st = ToStat(*r);
  fuse_reply_attr(req, &st, s.timeouts.attr_s);
}

void MkDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  SessionState& s = StateOf(req);
  perm::RequestCaller who(req);
  bool cacheable = true;
  Result<fs::Attr> r = NoThrow([&] {
    return s.fs->MkDir(parent, name, mode & 07777, who.caller(), who.check(),
                       who.check() ? &cacheable : nullptr);
  });
  if (!r.ok()) {
    ReplyStatus(req, r.status(), "mkdir");
    return;
  }
  fuse_entry_param e = EntryIn(*r, s.timeouts, cacheable);
  fuse_reply_entry(req, &e);
}

void MkNod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t /*rdev*/) {
  if (!S_ISREG(mode)) {
    // Device nodes, FIFOs and sockets are not supported (DESIGN.md).
    ReplyStatus(req, Status::Error(EPERM, "mknod: only regular files are supported"), "mknod");
    return;
  }
  // mknod(S_IFREG) is create + close.
  SessionState& s = StateOf(req);
  perm::RequestCaller who(req);
  bool cacheable = true;
  Result<fs::FileSystem::Created> r = NoThrow([&] {
    return s.fs->Create(parent, name, mode, O_WRONLY | O_CREAT | O_EXCL, who.caller(),
                        who.check(), who.check() ? &cacheable : nullptr);
  });
  if (!r.ok()) {
    ReplyStatus(req, r.status(), "mknod");
    return;
  }
  Status rel = NoThrowVoid([&] { s.fs->Release(r->fh); });
  if (!rel.ok()) spdlog::error("mknod: release of handle {}: {}", r->fh, rel.ToString());
  fuse_entry_param e = EntryIn(r->attr, s.timeouts, cacheable);
  fuse_reply_entry(req, &e);
}

void RmDir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  SessionState& s = StateOf(req);
  perm::RequestCaller who(req);
  ReplyStatus(req, NoThrow([&] { return s.fs->RmDir(parent, name, who.check()); }), "rmdir");
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  SessionState& s = StateOf(req);
  perm::RequestCaller who(req);
  ReplyStatus(req, NoThrow([&] { return s.fs->Unlink(parent, name, who.check()); }), "unlink");
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
            const char* newname, unsigned int flags) {
  SessionState& s = StateOf(req);
  perm::RequestCaller who(req);
  bool drop_names = false;
  Status st = NoThrow([&] {
    return s.fs->Rename(parent, name, newparent, newname, flags, who.check(),
                        who.check() ? &drop_names : nullptr);
  });
  // The moved name keeps the kernel's cache time in a directory where names
  // are not cached.
  if (st.ok() && drop_names) perm::DropAllNames(req);
  ReplyStatus(req, st, "rename");
}

void Access(fuse_req_t req, fuse_ino_t ino, int mask) {
  SessionState& s = StateOf(req);
  perm::RequestCaller who(req);
  // R_OK, W_OK, X_OK are fs::kMayRead, kMayWrite, kMayExec.
  const int want = mask & (R_OK | W_OK | X_OK);
  ReplyStatus(req, NoThrow([&] { return s.fs->Access(ino, want, who.check()); }), "access");
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  // Only the link that names an O_TMPFILE file; fs/ refuses any other with
  // EPERM, link(2)'s "the filesystem does not support hard links".
  SessionState& s = StateOf(req);
  perm::RequestCaller who(req);
  bool cacheable = true;
  Result<fs::Attr> r = NoThrow([&] {
    return s.fs->Link(ino, newparent, newname, who.check(), who.check() ? &cacheable : nullptr);
  });
  if (!r.ok()) {
    ReplyStatus(req, r.status(), "link");
    return;
  }
  fuse_entry_param e = EntryIn(*r, s.timeouts, cacheable);
  if (fuse_reply_entry(req, &e) == -ENOENT) {
    // Interrupted: the kernel does not count the lookup (the name stays).
    Status st = NoThrowVoid([&] { s.fs->Forget(ino, 1); });
    if (!st.ok()) spdlog::error("link: undoing an interrupted link's lookup: {}", st.ToString());
  }
}

void Symlink(fuse_req_t req, const char* /*link*/, fuse_ino_t /*parent*/, const char* /*name*/) {
  // EPERM is symlink(2)'s "the filesystem does not support symbolic links".
  ReplyStatus(req, Status::Error(EPERM, "symlink: symbolic links are not supported"),
              "symlink");
}

}  // namespace kvfs::fuse::ops
