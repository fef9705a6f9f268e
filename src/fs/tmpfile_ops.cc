// O_TMPFILE files and the one link that names them: the atomic-publish
// idiom of connectors that write a key as open(dir, O_TMPFILE), write, then
// linkat() of the unnamed file to its final name (llm-d's filesystem
// backend). kvfs has no hard links otherwise.
//
// An unnamed file is an orphan from its first change on, as a file
// unlinked while open is (changes.cc: orphan_puts, SettleOrphans,
// DeleteOrphan): the same change that puts its record puts its orphan key,
// so a crash before the link leaves an orphan that the next mount
// (volume::Volume reclaims orphans) or fsck.kvfs removes, and its last
// Release() without a link deletes it. The link is a namespace change
// queued like a rename, behind a data change that waits for the file's
// writes in flight: it puts the entry, the record with nlink 1 and deletes
// the orphan key in one commit, so a name never points at unwritten data.
#include <fcntl.h>
#include <sys/stat.h>

#include "fs/file_system_impl.h"

namespace kvfs::fs {

Result<FileSystem::Created> FileSystem::Impl::CreateUnnamed(uint64_t parent, uint32_t mode,
                                                            int flags, const Caller& caller,
                                                            const Caller* check,
                                                            bool* everyone_searches) {
  if ((mode & S_IFMT) != 0 && (mode & S_IFMT) != S_IFREG) {
    return Status::Error(EPERM, "only regular files and directories are supported");
  }
  InodeRef file;
  {
    NamespaceWriteLock ns(ns_.mu());  // SettleOrphans (in Enqueue) requires it
    KVFS_ASSIGN_OR_RETURN(InodeRef p, table_.Get(parent));
    if (!p->is_dir()) return Status::Error(ENOTDIR, "O_TMPFILE in a non-directory");
    KVFS_RETURN_IF_ERROR(MayChangeNamesIn(p, check, everyone_searches));
    {
      MutexLock l(p->mu());
      if (p->deleted) return Status::Error(ENOENT, "O_TMPFILE in a removed directory");
    }
    index::Inode rec = NewRecord(S_IFREG | (mode & 07777), caller, NowNs());
    InheritSetgid(*p, &rec);  // a setgid directory's group, as for a named file
    rec.nlink = 0;  // no name: the kernel allows a link only to such a file
    file = table_.Make(rec);
    {
      MutexLock l(file->mu());
      file->orphan = true;
      file->orphan_queued = false;  // until Enqueue(c) settles it
      // O_EXCL: "this file will never be linked" (open(2)).
      file->linkable = (flags & O_EXCL) == 0;
    }
    table_.Insert(file, /*lookups=*/1, /*opens=*/1);  // returned open, as create(2)
    auto c = NewChange();
    c->inodes = {file};
    c->orphan_puts.push_back(rec.ino);
    Enqueue(c);
  }
  // The O_TMPFILE bits (O_DIRECTORY among them) mean nothing to a handle.
  const uint64_t fh = handles_.Add(Handle{file, flags & ~O_TMPFILE, nullptr});
  MutexLock l(file->mu());
  return Created{ToAttr(file->rec), fh};
}

Result<Attr> FileSystem::Impl::Link(uint64_t ino, uint64_t new_parent,
                                    std::string_view new_name, const Caller* check,
                                    bool* everyone_searches) {
  KVFS_RETURN_IF_ERROR(CheckName(new_name));
  if (IsDotName(new_name)) return Status::Error(EEXIST, "link");
  NamespaceWriteLock ns(ns_.mu());
  // The new name's directory first: vfs_link() checks it (may_create())
  // before it looks at the inode.
  KVFS_ASSIGN_OR_RETURN(InodeRef np, table_.Get(new_parent));
  if (!np->is_dir()) return Status::Error(ENOTDIR, "link into a non-directory");
  KVFS_RETURN_IF_ERROR(MayChangeNamesIn(np, check, everyone_searches));
  KVFS_ASSIGN_OR_RETURN(InodeRef x, table_.Get(ino));
  {
    MutexLock l(x->mu());
    KVFS_RETURN_IF_ERROR(Linkable(*x));
  }
  auto existing = ns_.Resolve(new_parent, new_name);
  if (existing.ok()) return Status::Error(EEXIST, "link: name exists");
  if (existing.status().code() != ENOENT) return existing.status();
  {
    // Stays so: rmdir takes ns_.mu(), held here.
    MutexLock l(np->mu());
    if (np->deleted) return Status::Error(ENOENT, "link into a removed directory");
  }
  {
    // The name must not reach the index before the data written so far:
    // a data change gated on the writes in flight goes first (as rename).
    MutexLock l(x->mu());
    if (std::shared_ptr<Change> c = WriteOut(x)) {
      l.Unlock();
      Enqueue(c);
    }
  }
  NameChange change = NewNameChange();
  // Linkable() is checked again there, under x->mu().
  KVFS_RETURN_IF_ERROR(change.LinkUnnamed(np, new_name, x));
  QueueNameChange(change);
  Attr a;
  {
    MutexLock l(x->mu());
    a = ToAttr(x->rec);
    ServedAttr(x, &a);
  }
  // The kernel counts the entry of the reply as a lookup of the inode, which
  // is in the table (its handle and the change above hold it).
  KVFS_RETURN_IF_ERROR(table_.GetLookedUp(ino).status());
  return a;
}

}  // namespace kvfs::fs
