// Namespace operations: lookup, attributes, mkdir/rmdir, unlink, rename,
// directory listings. Each change is applied to the live state under ns_.mu()
// and queued for the index in the same order.
#include <linux/fs.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <set>

#include "common/format.h"
#include "fs/access.h"
#include "fs/file_system_impl.h"
#include "fs/killpriv.h"

namespace kvfs::fs {

Status FileSystem::Impl::MayAccessLocked(const InodeRef& i, const Caller* check, int want) {
  if (check == nullptr) return Status::OK();
  return CheckAccess(i->rec.mode, i->rec.uid, i->rec.gid, *check, want);
}

Status FileSystem::Impl::MayAccess(const InodeRef& i, const Caller* check, int want) {
  if (check == nullptr) return Status::OK();
  MutexLock l(i->mu());
  return MayAccessLocked(i, check, want);
}

Status FileSystem::Impl::MayChangeNamesIn(const InodeRef& p, const Caller* check,
                                          bool* everyone_searches) {
  if (check == nullptr && everyone_searches == nullptr) return Status::OK();
  MutexLock l(p->mu());
  if (everyone_searches != nullptr) *everyone_searches = EveryoneSearches(p->rec.mode);
  return MayAccessLocked(p, check, kMayWrite | kMayExec);
}

Status FileSystem::Impl::MayTakeName(const InodeRef& p, const InodeRef& victim,
                                     const Caller* check) {
  if (check == nullptr) return Status::OK();
  uint32_t dir_mode, dir_uid;
  {
    MutexLock l(p->mu());
    if (!(p->rec.mode & S_ISVTX)) return Status::OK();
    dir_mode = p->rec.mode;
    dir_uid = p->rec.uid;
  }
  MutexLock l(victim->mu());
  return CheckSticky(dir_mode, dir_uid, victim->rec.uid, *check);
}

Result<InodeRef> FileSystem::Impl::EntryToRemove(const InodeRef& p, std::string_view name,
                                                 const Caller* check) {
  // The name must exist before anything else is said about it.
  KVFS_ASSIGN_OR_RETURN(uint64_t ino, ns_.Resolve(p->ino, name));
  KVFS_ASSIGN_OR_RETURN(InodeRef v, table_.Get(ino));
  KVFS_RETURN_IF_ERROR(MayChangeNamesIn(p, check));
  KVFS_RETURN_IF_ERROR(MayTakeName(p, v, check));
  return v;
}

Result<Attr> FileSystem::Impl::Lookup(uint64_t parent, std::string_view name,
                                      const Caller* check, bool* everyone_searches) {
  InodeRef child;
  {
    NamespaceReadLock ns(ns_.mu());  // changes nothing ns_.mu() guards
    Result<InodeRef> got = table_.Get(parent);
    // Search permission first, as the kernel's walk checks it before it
    // asks the filesystem; a parent that is not a directory is ENOTDIR.
    if (got.ok() && (*got)->is_dir()) {
      const InodeRef& p = *got;
      MutexLock l(p->mu());
      if (everyone_searches != nullptr) *everyone_searches = EveryoneSearches(p->rec.mode);
      KVFS_RETURN_IF_ERROR(MayAccessLocked(p, check, kMayExec));
    }
    if (name.size() > kMaxNameLen) return Status::Error(ENAMETOOLONG, "lookup");
    KVFS_ASSIGN_OR_RETURN(InodeRef p, std::move(got));
    uint64_t ino;
    if (name == ".") {
      // Only the kernel's export support asks (open_by_handle_at of an
      // inode it no longer caches): the inode itself, of any type, while
      // it has a name. A number is reused only after a crash lost the
      // inode that had it, and then with another generation (generation_).
      MutexLock l(p->mu());
      if (p->deleted || p->orphan || p->rec.nlink == 0) {
        return Status::Error(ESTALE, "lookup of a removed inode by its number");
      }
      ino = parent;
    } else if (!p->is_dir()) {
      return Status::Error(ENOTDIR, "lookup");
    } else if (name == "..") {
      MutexLock l(p->mu());
      ino = p->rec.parent ? p->rec.parent : kRootIno;
    } else {
      KVFS_ASSIGN_OR_RETURN(ino, ns_.Resolve(parent, name));
    }
    // The kernel's lookup count goes on the state the table holds (other
    // walkers and the prefetch thread unpin and unload concurrently).
    KVFS_ASSIGN_OR_RETURN(child, table_.GetLookedUp(ino));
  }
  return AttrAndPrefetch(child, /*only_idle=*/false);
}

Attr FileSystem::Impl::AttrAndPrefetch(const InodeRef& inode, bool only_idle) {
  Attr a;
  bool prefetch = options_.prefetch == PrefetchMode::kLookup;
  {
    MutexLock l(inode->mu());
    a = ToAttr(inode->rec);
    ServedAttr(inode, &a);
    UsedForEviction(*inode, NowNs());  // lookup, getattr
    prefetch = prefetch && inode->is_reg() && !inode->deleted && !inode->orphan;
    if (prefetch && only_idle) {
      prefetch = inode->data.writes_in_flight() == 0 && !inode->data.change_queued() &&
                 table_.opens(*inode) == 0;  // under mu(): see NameChange::DropName
    }
  }
  // Connectors check which keys exist before they load them: start reading.
  // Queued after the attributes are read: the prefetch thread holds the
  // inode's mutex while it sets up the reads (cache memory included), and
  // lookups run on the thread that receives every request.
  if (prefetch) prefetcher_->Queue(inode);
  return a;
}

Result<Attr> FileSystem::Impl::GetAttr(uint64_t ino) {
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  // A stat of a name the kernel still has cached comes as a getattr, not a
  // lookup: the connector's exists() check before a load all the same
  // (without this, a load of keys stored by the same process waited for
  // its opens to start reading). But the kernel also sends one for an
  // fstat, and after a write or an unlink: a file that is open (an open
  // for reading prefetches by itself; a writer would read back what it
  // wrote), has writes not yet committed, or has lost its name is not
  // read ahead.
  return AttrAndPrefetch(i, /*only_idle=*/true);
}

Status FileSystem::Impl::Access(uint64_t ino, int want, const Caller* check,
                                bool* everyone_searches) {
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  MutexLock l(i->mu());
  if (everyone_searches != nullptr) *everyone_searches = EveryoneSearches(i->rec.mode);
  return MayAccessLocked(i, check, want);
}

Result<Attr> FileSystem::Impl::SetAttr(uint64_t ino, const SetAttrRequest& req,
                                       const Caller* check, bool* narrowed) {
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  // A size change waits for a write-out of the file's memory under way (a
  // served writer's release, which the kernel sends after close(2)
  // returned): it read the bytes before the truncate, and staging them
  // after it would give the file its old size back.
  std::shared_ptr<FileMemory> served =
      req.size && ram_->memory() ? ram_->memory()->Get(i->token) : nullptr;
  if (served) {
    MutexLock w(served->writeout_mu());
    return SetAttrLocked(i, req, check, narrowed);
  }
  return SetAttrLocked(i, req, check, narrowed);
}

Result<Attr> FileSystem::Impl::SetAttrLocked(const InodeRef& i, const SetAttrRequest& req,
                                             const Caller* check, bool* narrowed) {
  MutexLock l(i->mu());
  // Checked before anything changes (a truncate goes first below).
  std::optional<uint32_t> mode = req.mode;
  if (check != nullptr) {
    uint32_t chmod_mode = 0;
    KVFS_RETURN_IF_ERROR(
        CheckSetAttr(i->rec.mode, i->rec.uid, i->rec.gid, req, *check, &chmod_mode));
    if (mode) mode = chmod_mode;
  }
  if (i->deleted) return Status::Error(ENOENT, "setattr");
  const uint32_t mode_before = i->rec.mode;
  const int64_t now = NowNs();
  if (req.size) {
    if (i->is_dir()) return Status::Error(EISDIR, "truncate");
    // Opens served from the file's memory read its size there. What may
    // fail goes first, so that a failed truncate changes nothing: growing
    // the memory (tmpfs may be full), or a cut's restaging of the chunk it
    // falls in (the volume may be full); cutting the memory cannot fail.
    const bool grows = *req.size >= i->rec.size;
    if (grows) KVFS_RETURN_IF_ERROR(i->data.ResizeServed(*req.size, /*grow_only=*/false));
    if (*req.size != i->rec.size) {
      KVFS_RETURN_IF_ERROR(TruncateData(i, *req.size));
      i->rec.mtime_ns = now;
    }
    if (!grows) KVFS_RETURN_IF_ERROR(i->data.ResizeServed(*req.size, /*grow_only=*/false));
  }
  if (mode) i->rec.mode = (i->rec.mode & S_IFMT) | (*mode & 07777);
  if (req.uid) i->rec.uid = *req.uid;
  if (req.gid) i->rec.gid = *req.gid;
  if (req.kill_suidgid) {
    i->rec.mode = req.unprivileged ? KillSuidGidFor(i->rec.mode, i->rec.gid, *req.unprivileged)
                                   : KillSuidGid(i->rec.mode);
  }
  if (mode && req.unprivileged && (i->rec.mode & S_ISGID) &&
      !(req.unprivileged->in_group && req.unprivileged->in_group(i->rec.gid))) {
    // setattr_prepare()'s rule for chmod by a caller outside the group,
    // which the kernel skips for its own (ATTR_FORCE) mode changes.
    i->rec.mode &= ~S_ISGID;
  }
  if (req.atime_now) i->rec.atime_ns = now;
  else if (req.atime_ns) i->rec.atime_ns = *req.atime_ns;
  if (req.mtime_now) i->rec.mtime_ns = now;
  else if (req.mtime_ns) i->rec.mtime_ns = *req.mtime_ns;
  i->rec.ctime_ns = now;
  if (narrowed != nullptr) {
    *narrowed = i->is_dir() && EveryoneSearches(mode_before) && !EveryoneSearches(i->rec.mode);
  }
  Attr a = ToAttr(i->rec);
  ServedAttr(i, &a);
  l.Unlock();
  EnqueueRecord(i);
  return a;
}

Result<Attr> FileSystem::Impl::MkDir(uint64_t parent, std::string_view name, uint32_t mode,
                                     const Caller& caller, const Caller* check,
                                     bool* everyone_searches) {
  KVFS_RETURN_IF_ERROR(CheckName(name));
  if (IsDotName(name)) return Status::Error(EEXIST, "mkdir");
  NamespaceWriteLock ns(ns_.mu());
  KVFS_ASSIGN_OR_RETURN(InodeRef dir, AddChild(parent, name, S_IFDIR | (mode & 07777), caller,
                                               check, everyone_searches));
  ns_.NewDirectory(dir->ino);
  MutexLock l(dir->mu());
  return ToAttr(dir->rec);
}

index::Inode FileSystem::Impl::NewRecord(uint32_t mode, const Caller& caller, int64_t now) {
  index::Inode rec;
  rec.ino = volume_.index().AllocateIno();
  rec.mode = mode;
  rec.uid = caller.uid;
  rec.gid = caller.gid;
  rec.nlink = (mode & S_IFMT) == S_IFDIR ? 2 : 1;
  rec.atime_ns = rec.mtime_ns = rec.ctime_ns = now;
  rec.generation = generation_;
  return rec;
}

void FileSystem::Impl::InheritSetgid(InodeState& parent, index::Inode* rec) {
  MutexLock l(parent.mu());
  if (!(parent.rec.mode & S_ISGID)) return;
  // A setgid directory: what is made in it takes its group, and a
  // directory its setgid bit too (inode_init_owner(); the kernel has
  // already taken S_ISGID off a new file's mode where the creator may not
  // have it: mode_strip_sgid()).
  rec->gid = parent.rec.gid;
  if ((rec->mode & S_IFMT) == S_IFDIR) rec->mode |= S_ISGID;
}

Result<InodeRef> FileSystem::Impl::AddChild(uint64_t parent, std::string_view name,
                                            uint32_t mode, const Caller& caller,
                                            const Caller* check, bool* everyone_searches) {
  KVFS_ASSIGN_OR_RETURN(InodeRef p, table_.Get(parent));
  if (!p->is_dir()) return Status::Error(ENOTDIR, "create in a non-directory");
  KVFS_RETURN_IF_ERROR(MayChangeNamesIn(p, check, everyone_searches));
  auto existing = ns_.Resolve(parent, name);
  if (existing.ok()) return Status::Error(EEXIST, "name exists");
  if (existing.status().code() != ENOENT) return existing.status();
  {
    // Stays so: rmdir takes ns_.mu(), held here.
    MutexLock l(p->mu());
    if (p->deleted) return Status::Error(ENOENT, "create in a removed directory");
  }
  const bool is_dir = (mode & S_IFMT) == S_IFDIR;
  NameChange change = NewNameChange();
  index::Inode rec = NewRecord(mode, caller, change.now_ns());
  if (is_dir) rec.parent = parent;
  InheritSetgid(*p, &rec);
  InodeRef child = table_.Make(rec);
  table_.Insert(child, /*lookups=*/1, /*opens=*/is_dir ? 0 : 1);  // create(2) returns it open
  change.Link(p, name, child);
  QueueNameChange(change);
  return child;
}

Status FileSystem::Impl::RmDir(uint64_t parent, std::string_view name, const Caller* check) {
  if (name == ".") return Status::Error(EINVAL, "rmdir .");
  if (name == "..") return Status::Error(ENOTEMPTY, "rmdir ..");
  KVFS_RETURN_IF_ERROR(CheckName(name));
  NamespaceWriteLock ns(ns_.mu());
  KVFS_ASSIGN_OR_RETURN(InodeRef p, table_.Get(parent));
  if (!p->is_dir()) return Status::Error(ENOTDIR, "rmdir");
  KVFS_RETURN_IF_ERROR(MayAccess(p, check, kMayExec));
  KVFS_ASSIGN_OR_RETURN(InodeRef d, EntryToRemove(p, name, check));
  {
    MutexLock l(d->mu());
    if (!d->is_dir()) return Status::Error(ENOTDIR, "rmdir");
    // Stays so: entries change only under ns_.mu(), held here.
    if (d->rec.size > 0) return Status::Error(ENOTEMPTY, "rmdir");
  }
  NameChange change = NewNameChange();
  change.Unlink(p, name, d);
  QueueNameChange(change);
  return Status::OK();
}

Status FileSystem::Impl::Unlink(uint64_t parent, std::string_view name, const Caller* check) {
  NamespaceWriteLock ns(ns_.mu());
  return UnlinkLocked(parent, name, check);
}

Status FileSystem::Impl::UnlinkLocked(uint64_t parent, std::string_view name,
                                      const Caller* check) {
  KVFS_RETURN_IF_ERROR(CheckName(name));
  KVFS_ASSIGN_OR_RETURN(InodeRef p, table_.Get(parent));
  if (!p->is_dir()) return Status::Error(ENOTDIR, "unlink");
  KVFS_RETURN_IF_ERROR(MayAccess(p, check, kMayExec));
  KVFS_ASSIGN_OR_RETURN(InodeRef v, EntryToRemove(p, name, check));
  if (v->is_dir()) return Status::Error(EISDIR, "unlink");
  NameChange change = NewNameChange();
  change.Unlink(p, name, v);
  QueueNameChange(change);
  return Status::OK();
}

Status FileSystem::Impl::Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                                std::string_view new_name, unsigned flags, const Caller* check,
                                bool* drop_names) {
  KVFS_RETURN_IF_ERROR(CheckName(name));
  KVFS_RETURN_IF_ERROR(CheckName(new_name));
  if (IsDotName(name) || IsDotName(new_name)) return Status::Error(EINVAL, "rename . or ..");
  NamespaceWriteLock ns(ns_.mu());
  KVFS_ASSIGN_OR_RETURN(InodeRef p, table_.Get(parent));
  KVFS_ASSIGN_OR_RETURN(InodeRef np, table_.Get(new_parent));
  if (!p->is_dir() || !np->is_dir()) return Status::Error(ENOTDIR, "rename");
  // vfs_rename()'s checks, in its order, all before the call's own errors:
  // search on both parents (the walk), may_delete() of the source, then of
  // the target or may_create() in its directory.
  KVFS_RETURN_IF_ERROR(MayAccess(p, check, kMayExec));
  KVFS_RETURN_IF_ERROR(MayAccess(np, check, kMayExec));
  KVFS_ASSIGN_OR_RETURN(InodeRef x, EntryToRemove(p, name, check));
  const uint64_t src = x->ino;
  KVFS_RETURN_IF_ERROR(MayChangeNamesIn(np, check));
  InodeRef y;
  auto dst = ns_.Resolve(new_parent, new_name);
  if (dst.ok()) {
    KVFS_ASSIGN_OR_RETURN(y, table_.Get(*dst));
    KVFS_RETURN_IF_ERROR(MayTakeName(np, y, check));
  } else if (dst.status().code() != ENOENT) {
    return dst.status();
  }
  if (parent != new_parent && x->is_dir()) {
    KVFS_RETURN_IF_ERROR(MayAccess(x, check, kMayWrite));  // its ".." changes
  }
  if (flags & ~static_cast<unsigned>(RENAME_NOREPLACE)) {
    return Status::Error(EINVAL, "rename: only RENAME_NOREPLACE is supported");
  }
  if (y) {
    if (flags & RENAME_NOREPLACE) return Status::Error(EEXIST, "rename");
    if (y->ino == src) return Status::OK();  // same file: nothing to do
    if (x->is_dir() && !y->is_dir()) return Status::Error(ENOTDIR, "rename");
    if (!x->is_dir() && y->is_dir()) return Status::Error(EISDIR, "rename");
    if (y->is_dir()) {
      MutexLock l(y->mu());
      if (y->rec.size > 0) return Status::Error(ENOTEMPTY, "rename");
    }
  }
  if (drop_names != nullptr && parent != new_parent) {
    bool from_everyones = false;
    {
      MutexLock l(p->mu());
      from_everyones = EveryoneSearches(p->rec.mode);
    }
    MutexLock l(np->mu());
    *drop_names = from_everyones && !EveryoneSearches(np->rec.mode);
  }
  if (x->is_dir() && parent != new_parent) {
    // Moving a directory below itself would cut it off from the tree.
    uint64_t a = new_parent;
    while (a != kRootIno && a != 0) {
      if (a == src) return Status::Error(EINVAL, "rename: directory into its own subtree");
      KVFS_ASSIGN_OR_RETURN(InodeRef ai, table_.Get(a));
      MutexLock l(ai->mu());
      a = ai->rec.parent;
    }
  }

  // The new name must not become visible before the data written so far.
  if (x->is_reg()) {
    MutexLock l(x->mu());
    if (std::shared_ptr<Change> c = WriteOut(x)) {
      l.Unlock();
      Enqueue(c);
    }
  }
  NameChange change = NewNameChange();
  change.Move(p, name, np, new_name, x, y);
  QueueNameChange(change);
  return Status::OK();
}

Result<uint64_t> FileSystem::Impl::OpenDir(uint64_t ino, int flags, const Caller* check) {
  {
    KVFS_ASSIGN_OR_RETURN(InodeRef d, table_.Get(ino));
    if (check != nullptr) {
      MutexLock l(d->mu());
      KVFS_RETURN_IF_ERROR(MayAccessLocked(d, check, WantOfOpen(flags)));
    }
    if (!d->is_dir()) return Status::Error(ENOTDIR, "opendir");
  }
  // Listed at the first ReadDir: a listing shows the directory as it is
  // when it is read from the start, also after a seek back to 0 that the
  // kernel does not pass on (lseek(fd, 0) right after opendir, rewinddir).
  auto dh = std::make_unique<DirHandle>();
  dh->ino = ino;
  return handles_.AddDir(std::move(dh));
}

Status FileSystem::Impl::ListDir(DirHandle* dh) {
  const uint64_t ino = dh->ino;
  std::vector<DirHandle::Item> items;
  {
    NamespaceReadLock ns(ns_.mu());  // reads only
    KVFS_ASSIGN_OR_RETURN(InodeRef d, table_.Get(ino));
    uint64_t parent;
    {
      MutexLock l(d->mu());
      if (!d->is_dir()) return Status::Error(ENOTDIR, "opendir");
      // Removed since it was opened: an empty listing, as on a local
      // filesystem.
      if (d->deleted) {
        dh->items.clear();
        return Status::OK();
      }
      parent = d->rec.parent ? d->rec.parent : kRootIno;
      NoteUse(d, NowNs());  // the listing reads the directory
    }
    items.push_back({".", ino, S_IFDIR});
    items.push_back({"..", parent, S_IFDIR});
    std::vector<Namespace::Entry> names;
    KVFS_RETURN_IF_ERROR(ns_.List(ino, &names));
    for (Namespace::Entry& e : names) items.push_back({std::move(e.name), e.child, 0});
  }
  dh->items = std::move(items);
  return Status::OK();
}

Status FileSystem::Impl::ReadDir(
    uint64_t dh, uint64_t off,
    const std::function<bool(std::string_view, uint64_t, uint32_t, uint64_t)>& fn) {
  DirHandle* d = handles_.GetDir(dh);
  if (d == nullptr) return Status::Error(EBADF, "readdir");
  std::lock_guard<std::mutex> l(d->mu);
  // A listing that starts over (rewinddir, or a seek to 0) shows the
  // directory as it is now; one resumed past 0 goes on in its snapshot, so
  // that offsets stay stable while names change.
  if (off == 0 || !d->listed) KVFS_RETURN_IF_ERROR(ListDir(d));
  d->listed = true;
  for (uint64_t i = off; i < d->items.size(); ++i) {
    const auto& item = d->items[i];
    if (!fn(item.name, item.ino, item.mode, i + 1)) break;
  }
  return Status::OK();
}

}  // namespace kvfs::fs
