// Regular files: create/open/close, fsync, fallocate, and read(2). The
// write path is write_behind.cc; where read bytes come from, read_path.cc.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/format.h"
#include "common/sync_point.h"
#include "fs/access.h"
#include "fs/chunk_cache.h"
#include "fs/file_memory.h"
#include "fs/file_system_impl.h"
#include "fs/killpriv.h"

namespace kvfs::fs {

namespace {

Status NoHandle(const char* op) { return Status::Error(EBADF, op); }

}  // namespace

// ------------------------------------------------------------ open / close

Result<FileSystem::Created> FileSystem::Impl::Create(uint64_t parent, std::string_view name,
                                                     uint32_t mode, int flags,
                                                     const Caller& caller, const Caller* check,
                                                     bool* everyone_searches) {
  KVFS_RETURN_IF_ERROR(CheckName(name));
  if (IsDotName(name)) return Status::Error(EEXIST, "create");
  if ((mode & S_IFMT) != 0 && (mode & S_IFMT) != S_IFREG) {
    return Status::Error(EPERM, "only regular files and directories are supported");
  }
  InodeRef file;
  {
    NamespaceWriteLock ns(ns_.mu());
    KVFS_ASSIGN_OR_RETURN(file, AddChild(parent, name, S_IFREG | (mode & 07777), caller, check,
                                         everyone_searches));
  }
  const uint64_t fh = handles_.Add(Handle{file, flags, nullptr});
  MutexLock l(file->mu());  // its name is visible: others may use it
  return Created{ToAttr(file->rec), fh};
}

Result<uint64_t> FileSystem::Impl::Open(uint64_t ino, int flags, KillPriv* kill,
                                        const Caller* check) {
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  {
    MutexLock l(i->mu());
    KVFS_RETURN_IF_ERROR(MayAccessLocked(i, check, WantOfOpen(flags)));
    KVFS_RETURN_IF_ERROR(OpenLocked(i, flags, kill, nullptr));
  }
  return AddOpenHandle(i, flags, nullptr);
}

uint64_t FileSystem::Impl::AddOpenHandle(const InodeRef& i, int flags,
                                         std::shared_ptr<FileMemory> served) {
  if ((flags & O_ACCMODE) == O_RDONLY && options_.prefetch != PrefetchMode::kOff) {
    prefetcher_->NoteReadOpen(i->ino);
  }
  return handles_.Add(Handle{i, flags, std::move(served)});
}

Status FileSystem::Impl::OpenLocked(const InodeRef& i, int flags, KillPriv* kill,
                                    const std::shared_ptr<FileMemory>& served, bool pending) {
  if (i->is_dir()) return Status::Error(EISDIR, "open");
  // Removed between the kernel's lookup and this open (a rename-over or
  // unlink raced it): ESTALE makes the kernel look the name up again
  // (do_filp_open retries with LOOKUP_REVAL) and open what it names now.
  if (i->deleted) return Status::Error(ESTALE, "open of a removed file");
  const uint32_t mode =
      kill && (flags & O_TRUNC) ? KillSuidGidFor(i->rec.mode, i->rec.gid, *kill) : i->rec.mode;
  if (served && !pending && (flags & O_TRUNC)) {
    KVFS_RETURN_IF_ERROR(i->data.ResizeServed(0, false));
  }
  if (((flags & O_TRUNC) && i->rec.size > 0) || mode != i->rec.mode) {
    // The kernel checked write permission for O_TRUNC, even with O_RDONLY
    // (Linux truncates then too). To size 0 nothing is staged: no failure.
    if (i->rec.size > 0) KVFS_RETURN_IF_ERROR(TruncateData(i, 0));
    i->rec.mode = mode;
    i->rec.mtime_ns = i->rec.ctime_ns = NowNs();
    EnqueueRecord(i);
  }
  if ((flags & O_ACCMODE) != O_WRONLY) NoteUse(i, NowNs());
  if (!served && (flags & O_ACCMODE) != O_WRONLY && options_.prefetch != PrefetchMode::kOff) {
    PrefetchLocked(i);
  }
  table_.AddOpen(*i);  // under i->mu(): see NameChange::DropName
  if (served && pending) {
    i->data.AddPending(served);
  } else if (served) {
    i->data.AddServed((flags & O_ACCMODE) != O_RDONLY);
    ram_->memory()->NoteServed(*served, i->rec.size);
  }
  return Status::OK();
}

void FileSystem::Impl::OpenServed(uint64_t ino, int flags, KillPriv* kill, const Caller* check,
                                  std::function<bool(FileMemory&)> can_serve,
                                  std::function<void(Result<Opened>)> done) {
  auto plain = [&] {
    Result<uint64_t> r = Open(ino, flags, kill, check);
    if (!r.ok()) return done(r.status());
    done(Opened{*r, nullptr});
  };
  if (!ram_->memory()) return plain();
  Result<InodeRef> got = table_.Get(ino);
  if (!got.ok()) return done(got.status());
  const InodeRef i = std::move(*got);
  std::shared_ptr<FileMemory> m;
  std::vector<device::IoRequest> reqs;
  {
    MutexLock l(i->mu());
    if (Status may = MayAccessLocked(i, check, WantOfOpen(flags)); !may.ok()) {
      l.Unlock();
      return done(may);
    }
    if (std::shared_ptr<FileMemory> held = i->data.served()) {
      // The kernel's rule: while an open is served from the file's memory,
      // every open is, whatever its flags (a writer's bytes land there and
      // are written out by Flush, Fsync and Release).
      ram_->memory()->Get(i->token);  // a use, in the cache's order
      Status st = OpenLocked(i, flags, kill, held);
      l.Unlock();
      if (!st.ok()) return done(st);
      return done(Opened{AddOpenHandle(i, flags, held), held});
    }
    // Served only when no other open could conflict (a writer's bytes go
    // through Write(); an O_DIRECT open puts the kernel in cached mode):
    // nothing open but other opens waiting for the same load. A version
    // whose load failed is read through the chunk cache.
    const bool reader = (flags & O_ACCMODE) == O_RDONLY && (flags & O_TRUNC) == 0;
    if (reader && !i->is_dir() && MemoryEligible(i)) {
      std::shared_ptr<FileMemory> cur = CurrentMemory(i);
      if (i->data.OthersServedFrom(cur.get(), table_.opens(*i)) &&
          !(cur && cur->state() == FileMemory::State::kFailed)) {
        m = cur ? std::move(cur) : StartMemoryLoad(i, /*prefetch=*/false, &reqs);
        if (m && !reqs.empty()) ram_->memory()->NoteOpenLoad(*m);
      }
    }
    if (!m) {
      // Not served: counted as an open in this hold of i->mu(), the one
      // that decided it. Counted later, an open decided in between could
      // be served (nothing else open), beside this ordinary one: the
      // kernel then fails the later of the two with EIO, or takes both,
      // and this open's writes reach the file while reads are served from
      // the memory, which keeps the old bytes.
      Status st = OpenLocked(i, flags, kill, nullptr);
      l.Unlock();
      if (!st.ok()) return done(st);
      KVFS_SYNC_POINT("FileSystem::OpenServed:NotServed");  // no lock held
      return done(Opened{AddOpenHandle(i, flags, nullptr), nullptr});
    }
    Status st = OpenLocked(i, flags, kill, m, /*pending=*/true);
    if (!st.ok()) {
      l.Unlock();
      if (!reqs.empty()) sched_->Submit(io::Lane::kRead, reqs);  // the load stays cached
      return done(st);
    }
  }
  if (!reqs.empty()) sched_->Submit(io::Lane::kRead, reqs);
  // Readahead of the files after it (inode order) starts now, not after
  // this file's load.
  if (options_.prefetch != PrefetchMode::kOff) prefetcher_->NoteReadOpen(ino);
  auto pin = std::make_shared<InodePin>(table_.Pin(i));  // while it waits
  WhenMemoryLoaded(m, [this, pin, m, flags, can_serve, done](bool ok) {
    const InodeRef& i = pin->ref();
    // The kernel is given the memory (BACKING_OPEN) before the inode's
    // lock is taken: an open that ends up not served leaves it exported,
    // as a served one's memory stays after its last close.
    const bool exportable = ok && can_serve(*m);
    MutexLock l(i->mu());
    // Still nothing open but opens served from (or waiting for) `m`, and
    // `m` still the file's memory: served (FileData::EndPending).
    // Otherwise the open stays as counted, a handle like Open()'s.
    const bool serve =
        i->data.EndPending(m, exportable && ram_->memory()->Get(i->token) == m,
                           MemoryIsCurrent(i, *m), table_.opens(*i),
                           (flags & O_ACCMODE) != O_RDONLY);
    KVFS_SYNC_POINT_ARG("FileSystem::OpenServed:Decided", ram_->memory());
    if (serve) ram_->memory()->NoteServed(*m, i->rec.size);
    l.Unlock();
    const uint64_t fh = handles_.Add(Handle{i, flags, serve ? m : nullptr});
    done(Opened{fh, serve ? m : nullptr});
  });
}

void FileSystem::Impl::ServedAttr(const InodeRef& i, Attr* a) {
  ServedAttrs m;
  if (!i->data.ServedAttrsOf(&m)) return;
  a->size = m.size;
  a->blocks = AlignUp(a->size, kBlockSize) / 512;
  a->mtime_ns = std::max<int64_t>(a->mtime_ns, m.mtime_ns);
}

Status FileSystem::Impl::WriteOutMemory(uint64_t fh, const InodeRef& i, FileMemory& m) {
  // One write-out of `m` at a time, each reading the memory after the one
  // before it and staging what it read before the next reads: the last to
  // run stages the newest bytes. (Two at once could stage in the other
  // order than they read: an older release's write-out, which the kernel
  // sends after close(2) returned, after the next writer's close.) Every
  // write through a served open is followed by a write-out that starts
  // after it completed (its own close's Flush), so one that read the
  // memory while a write was still being copied is always followed by a
  // whole one. Nothing cheaper tells whether the kernel changed the memory
  // since the last write-out: it moves the change time before it copies
  // the bytes, and a shared map's stores move no time at all.
  MutexLock w(m.writeout_mu());
  struct stat st;
  if (fstat(m.fd(), &st) != 0) return Status::Error(errno, "file memory");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  {
    MutexLock l(i->mu());
    if (size < i->rec.size) KVFS_RETURN_IF_ERROR(TruncateData(i, size));
  }
  // The whole file, as a writer would write it: kvfs cannot know which
  // bytes the kernel changed.
  LargeBuffer buf = LargeBuffer::Allocate(kChunkBytes);
  if (!buf) return Status::Error(ENOMEM, "write-out buffer");
  for (uint64_t off = 0; off < size;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, size - off));
    ssize_t got = pread(m.fd(), buf.get(), want, static_cast<off_t>(off));
    if (got < 0) return Status::Error(errno, "reading file memory");
    if (got == 0) break;  // cut shorter meanwhile: a later write-out follows
    KVFS_SYNC_POINT_ARG("FileSystem::WriteOutMemory:Read", &m);  // holds m.writeout_mu()
    KVFS_RETURN_IF_ERROR(
        Write(fh, off, std::span<const char>(buf.get(), static_cast<size_t>(got)), nullptr,
              /*may_wait=*/true)
            .status());
    off += static_cast<uint64_t>(got);
  }
  return Status::OK();
}

Status FileSystem::Impl::Flush(uint64_t fh, bool may_wait) {
  std::optional<Handle> h = handles_.Get(fh);
  if (!h) return NoHandle("flush");
  if (!h->writable()) return Status::OK();
  // A writer served from file memory writes it out at flush, fsync and
  // release: as long as a write.
  if (h->memory) {
    if (!may_wait) return Status::Error(kWouldWait, "flush: writes out served memory");
    KVFS_RETURN_IF_ERROR(WriteOutMemory(fh, h->inode, *h->memory));
  }
  const InodeRef& i = h->inode;
  MutexLock l(i->mu());
  if (std::shared_ptr<Change> c = WriteOut(i)) {
    l.Unlock();
    Enqueue(c);
    l.Lock();
  }
  if (const int err = i->data.write_error()) {
    return Status::Error(err, "write-behind of inode " + std::to_string(i->ino) + " failed");
  }
  return Status::OK();
}

bool FileSystem::Impl::Release(uint64_t fh, bool may_wait) {
  if (std::optional<Handle> w = handles_.Get(fh); w && w->memory && w->writable()) {
    if (!may_wait) return false;
    // Also what a shared writable map changed after the last close.
    Status st = WriteOutMemory(fh, w->inode, *w->memory);
    if (!st.ok()) {
      const InodeRef& i = w->inode;
      MutexLock l(i->mu());
      i->data.NoteWriteError(st.code());
    }
  }
  std::optional<Handle> h = handles_.Take(fh);
  if (!h) return true;
  const InodeRef i = std::move(h->inode);
  if (h->memory) {
    MutexLock l(i->mu());
    // The last served open of memory a writer used: its bytes are the
    // file's now (written out), and the next load reads them back.
    if (i->data.ReleaseServed(*h->memory)) ram_->memory()->Erase(i->token, h->memory.get());
  }
  if (!table_.DropOpen(*i)) return true;
  MutexLock l(i->mu());
  SubmitAllStaged(i);
  // A stored key is loaded later, from kvfs (the connector's own memory
  // tier holds it meanwhile): memory of its size is made ahead of that load.
  if (h->writable() && MemoryEligible(i)) {
    ram_->memory()->ExpectLoad(AlignUp(i->rec.size, kBlockSize));
  }
  if (table_.opens(*i) > 0) return true;  // reopened meanwhile
  if (i->orphan && !i->deleted) {
    // The last handle of a file unlinked while open: it goes away now, in
    // a change queued after the unlink's. If the unlink's change is not
    // queued yet, its SettleOrphans() queues the delete instead (taking
    // ns_.mu() here could wait behind a batch's walk).
    if (i->orphan_queued) {
      std::shared_ptr<Change> d = OrphanDelete(i);
      l.Unlock();
      Enqueue(d);
    }
    return true;
  }
  if (i->data.writes_in_flight() > 0 || i->data.change_queued()) {
    Enqueue(QueueDataChange(i, false));
  }
  l.Unlock();
  table_.UnloadIfUnused(i);
  return true;
}

bool FileSystem::Impl::Fsync(uint64_t fh, std::function<void(Status)> done, bool may_wait) {
  std::optional<Handle> h = handles_.Get(fh);
  if (!h) {
    done(NoHandle("fsync"));
    return true;
  }
  if (options_.read_only) {  // nothing was written
    done(Status::OK());
    return true;
  }
  if (h->memory && h->writable()) {
    if (!may_wait) return false;
    Status st = WriteOutMemory(fh, h->inode, *h->memory);
    if (!st.ok()) {
      done(st);
      return true;
    }
  }
  InodeRef i = std::move(h->inode);
  MutexLock l(i->mu());
  SubmitAllStaged(i);
  auto c = QueueDataChange(i, /*sync=*/true);
  c->waiters.push_back([i, done = std::move(done)](Status st) {
    int err;
    {
      MutexLock l2(i->mu());
      err = i->data.write_error();
    }
    if (err) {
      return done(Status::Error(err, "write-behind of inode " + std::to_string(i->ino) + " failed"));
    }
    done(st);
  });
  l.Unlock();
  Enqueue(c);
  return true;
}

Status FileSystem::Impl::Fallocate(uint64_t fh, int mode, uint64_t off, uint64_t len,
                                   KillPriv* kill) {
  if (mode != 0) return Status::Error(EOPNOTSUPP, "fallocate: only mode 0 is supported");
  if (len == 0) return Status::Error(EINVAL, "fallocate: zero length");
  std::optional<Handle> h = handles_.Get(fh);
  if (!h) return NoHandle("fallocate");
  if (!h->writable()) return Status::Error(EBADF, "fallocate on a read-only handle");
  MutexLock l(h->inode->mu());
  KVFS_RETURN_IF_ERROR(h->inode->data.ResizeServed(off + len, /*grow_only=*/true));
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
    l.Unlock();
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
  std::shared_ptr<FileMemory> memory;  // or this: the whole file
  InodePin pin;
  std::vector<device::IoRequest> ahead;  // read-ahead of a large file
  std::vector<std::shared_ptr<CachedChunk>> ahead_entries;
  {
    MutexLock l(i->mu());
    const uint64_t fsize = i->rec.size;
    if (size > 0) NoteUse(i, NowNs());
    if (off >= fsize || size == 0) return done(Status::OK(), {});
    len = std::min<uint64_t>(size, fsize - off);
    ReadAheadLocked(i, off, len, &ahead, &ahead_entries);
    if (std::shared_ptr<FileMemory> m = HeldMemory(i);
        m && m != i->data.served() && off + len <= m->mapped()) {
      memory = std::move(m);
    } else {
      whole = CachedWhole(i, off, len);
    }
    if (!whole && !memory) {
      // A block of slack: the device read of the file's last block lands whole.
      const uint64_t cap = AlignUp(len, kBlockSize) + kBlockSize;
      out = std::make_shared<LargeBuffer>(LargeBuffer::Allocate(cap));
      if (!*out) return done(Status::Error(ENOMEM, "read buffer"), {});
      PlanRead(i, off, len, out->get(), cap, &plan);
      if (plan.fail.ok() && plan.has_work()) pin = table_.Pin(i);  // until the reads complete
    }
  }
  if (!ahead.empty()) {
    sched_->Submit(io::Lane::kPrefetch, ahead);
    PromoteWaitedFor(&ahead_entries);
  }
  if (memory) {
    // A key loaded (or loading) into its file memory: answered from there.
    ram_->memory()->MarkUsed(*memory);
    auto reply = [memory, off, len, done](bool ok) {
      if (!ok) return done(Status::Error(EIO, "reading the data into memory failed"), {});
      done(Status::OK(), std::span<const char>(memory->data() + off, len));
    };
    WhenMemoryLoaded(memory, std::move(reply));
    return;
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
