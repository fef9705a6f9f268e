// Regular files: create/open/close, fsync, fallocate, and read(2). The
// write path is write_behind.cc; where read bytes come from, read_path.cc.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "common/format.h"
#include "fs/chunk_cache.h"
#include "fs/file_system_impl.h"
#include "fs/killpriv.h"

namespace kvfs::fs {

namespace {

Status NoHandle(const char* op) { return Status::Error(EBADF, op); }

}  // namespace

// ------------------------------------------------------------ open / close

Result<FileSystem::Created> FileSystem::Impl::Create(uint64_t parent, std::string_view name,
                                                     uint32_t mode, int flags,
                                                     const Caller& caller) {
  KVFS_RETURN_IF_ERROR(CheckName(name));
  if (IsDotName(name)) return Status::Error(EEXIST, "create");
  if ((mode & S_IFMT) != 0 && (mode & S_IFMT) != S_IFREG) {
    return Status::Error(EPERM, "only regular files and directories are supported");
  }
  InodeRef file;
  {
    std::lock_guard<NamespaceLock> ns(ns_mu_);
    KVFS_ASSIGN_OR_RETURN(file, AddChild(parent, name, S_IFREG | (mode & 07777), caller));
  }
  const uint64_t fh = handles_.Add(Handle{file, flags});
  std::lock_guard<std::mutex> l(file->mu);  // its name is visible: others may use it
  return Created{ToAttr(file->rec), fh};
}

Result<uint64_t> FileSystem::Impl::Open(uint64_t ino, int flags, KillPriv* kill) {
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  {
    std::unique_lock<std::mutex> l(i->mu);
    if (i->is_dir()) return Status::Error(EISDIR, "open");
    // Removed between the kernel's lookup and this open (a rename-over or
    // unlink raced it): ESTALE makes the kernel look the name up again
    // (do_filp_open retries with LOOKUP_REVAL) and open what it names now.
    if (i->deleted) return Status::Error(ESTALE, "open of a removed file");
    const uint32_t mode =
        kill && (flags & O_TRUNC) ? KillSuidGidFor(i->rec.mode, i->rec.gid, *kill) : i->rec.mode;
    if (((flags & O_TRUNC) && i->rec.size > 0) || mode != i->rec.mode) {
      // The kernel checked write permission for O_TRUNC, even with O_RDONLY
      // (Linux truncates then too). To size 0 nothing is staged: no failure.
      if (i->rec.size > 0) KVFS_RETURN_IF_ERROR(TruncateData(i, 0));
      i->rec.mode = mode;
      i->rec.mtime_ns = i->rec.ctime_ns = NowNs();
      EnqueueRecord(i);
    }
    if ((flags & O_ACCMODE) != O_WRONLY) NoteUse(i, NowNs());
    if ((flags & O_ACCMODE) != O_WRONLY && options_.prefetch != PrefetchMode::kOff) Prefetch(i);
    table_.AddOpen(*i);  // under i->mu: see DropLink
  }
  if ((flags & O_ACCMODE) == O_RDONLY && options_.prefetch != PrefetchMode::kOff) {
    prefetcher_->NoteReadOpen(ino);
  }
  return handles_.Add(Handle{i, flags});
}

Status FileSystem::Impl::Flush(uint64_t fh) {
  std::optional<Handle> h = handles_.Get(fh);
  if (!h) return NoHandle("flush");
  if (!h->writable()) return Status::OK();
  std::unique_lock<std::mutex> l(h->inode->mu);
  WriteOutAndQueue(h->inode, l);
  if (!l.owns_lock()) l.lock();
  if (h->inode->write_error) {
    return Status::Error(h->inode->write_error, "write-behind of inode " +
                                                    std::to_string(h->inode->ino) + " failed");
  }
  return Status::OK();
}

void FileSystem::Impl::Release(uint64_t fh) {
  std::optional<Handle> h = handles_.Take(fh);
  if (!h) return;
  const InodeRef i = std::move(h->inode);
  if (!table_.DropOpen(*i)) return;
  std::unique_lock<std::mutex> l(i->mu);
  SubmitAllStaged(i);
  if (table_.opens(*i) > 0) return;  // reopened meanwhile
  if (i->orphan && !i->deleted) {
    // The last handle of a file unlinked while open: it goes away now, in
    // a change queued after the unlink's. If the unlink's change is not
    // queued yet, its SettleOrphans() queues the delete instead (taking
    // ns_mu_ here could wait behind a batch's walk).
    if (i->orphan_queued) DeleteOrphan(i, l);
    return;
  }
  if (i->inflight_writes > 0 || i->data_change_queued) Enqueue(QueueDataChange(i, false));
  l.unlock();
  table_.EvictIfUnused(i);
}

void FileSystem::Impl::Fsync(uint64_t fh, std::function<void(Status)> done) {
  std::optional<Handle> h = handles_.Get(fh);
  if (!h) return done(NoHandle("fsync"));
  if (options_.read_only) return done(Status::OK());  // nothing was written
  InodeRef i = std::move(h->inode);
  std::unique_lock<std::mutex> l(i->mu);
  SubmitAllStaged(i);
  auto c = QueueDataChange(i, /*sync=*/true);
  c->waiters.push_back([i, done = std::move(done)](Status st) {
    int err;
    {
      std::lock_guard<std::mutex> l2(i->mu);
      err = i->write_error;
    }
    if (err) {
      return done(Status::Error(err, "write-behind of inode " + std::to_string(i->ino) + " failed"));
    }
    done(st);
  });
  l.unlock();
  Enqueue(c);
}

Status FileSystem::Impl::Fallocate(uint64_t fh, int mode, uint64_t off, uint64_t len,
                                   KillPriv* kill) {
  if (mode != 0) return Status::Error(EOPNOTSUPP, "fallocate: only mode 0 is supported");
  if (len == 0) return Status::Error(EINVAL, "fallocate: zero length");
  std::optional<Handle> h = handles_.Get(fh);
  if (!h) return NoHandle("fallocate");
  if (!h->writable()) return Status::Error(EBADF, "fallocate on a read-only handle");
  std::unique_lock<std::mutex> l(h->inode->mu);
  InodeState& i = *h->inode;
  const uint32_t mode_was = i.rec.mode;
  bool grew = false;
  // file_modified(): the kernel sent its own mode change first (a SETATTR)
  // only when FUSE's rule (group-execute) drops something.
  if (kill) i.rec.mode = KillSuidGidFor(i.rec.mode, i.rec.gid, *kill);
  if (off + len > i.rec.size) {
    uint64_t grow = off + len - i.rec.size;
    if (grow > volume_.space().free_bytes) {
      i.rec.mode = mode_was;
      if (kill) kill->mode_changed = false;
      return Status::Error(ENOSPC, "fallocate");
    }
    i.rec.size = off + len;
    grew = true;
  }
  if (grew || i.rec.mode != mode_was) {
    i.rec.ctime_ns = NowNs();
    l.unlock();
    EnqueueRecord(h->inode);
  }
  return Status::OK();
}

// ------------------------------------------------------------ read(2)

void FileSystem::Impl::Read(uint64_t fh, uint64_t off, size_t size, ReadDone done,
                            CancelFlag cancel) {
  std::optional<Handle> h = handles_.Get(fh);
  if (!h) return done(NoHandle("read"), {});
  const InodeRef i = std::move(h->inode);
  ReadPlan plan;
  std::shared_ptr<LargeBuffer> out;
  uint64_t len;
  std::shared_ptr<CachedChunk> whole;  // holds all of [off, off + len)
  InodePin pin;
  {
    std::lock_guard<std::mutex> l(i->mu);
    const uint64_t fsize = i->rec.size;
    if (size > 0) NoteUse(i, NowNs());
    if (off >= fsize || size == 0) return done(Status::OK(), {});
    len = std::min<uint64_t>(size, fsize - off);
    whole = CachedWhole(i, off, len);
    if (!whole) {
      // A block of slack: the device read of the file's last block lands whole.
      const uint64_t cap = AlignUp(len, kBlockSize) + kBlockSize;
      out = std::make_shared<LargeBuffer>(LargeBuffer::Allocate(cap));
      if (!*out) return done(Status::Error(ENOMEM, "read buffer"), {});
      PlanRead(i, off, len, out->get(), cap, &plan);
      if (plan.fail.ok() && plan.has_work()) pin = table_.Pin(i);  // until the reads complete
    }
  }
  if (whole) {
    // The common read of a prefetched key: answered from the cache entry
    // itself, not copied into a reply buffer first (a cache entry's bytes
    // never change; `whole` keeps them until the reply is sent).
    const uint64_t at = off % kChunkBytes;
    auto reply = [whole, at, len, done](bool ok) {
      if (!ok) return done(Status::Error(EIO, "reading the data into the cache failed"), {});
      done(Status::OK(), std::span<const char>(whole->data.get() + at, len));
    };
    WhenLoaded(whole, std::move(reply));
    return;
  }
  if (!plan.fail.ok() || !plan.has_work()) {
    if (!plan.loads.empty()) sched_->Submit(io::Lane::kRead, plan.loads);
    if (!plan.fail.ok()) return done(plan.fail, {});
    return done(Status::OK(), std::span<const char>(out->get(), len));
  }
  char* dst = out->get();
  ExecuteRead(std::move(pin), std::move(plan), dst, std::move(cancel),
              [out = std::move(out), len, done = std::move(done)](Status st) {
                if (!st.ok()) return done(st, {});
                done(Status::OK(), std::span<const char>(out->get(), len));
              });
}

}  // namespace kvfs::fs
