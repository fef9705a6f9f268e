// Regular files: create/open/close, the staged write path, write-behind of
// chunks, and reads that merge staged, in-flight and on-device data.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/crc32c.h"
#include "common/format.h"
#include "fs/chunk_cache.h"
#include "fs/file_system_impl.h"

namespace kvfs::fs {

namespace {

uint64_t TotalLen(const std::vector<Extent>& v) {
  uint64_t n = 0;
  for (const auto& e : v) n += e.len;
  return n;
}

// Bytes of the chunk starting at `cstart` that lie inside a file of `size`.
uint64_t ChunkValid(uint64_t size, uint64_t cstart) {
  return size > cstart ? std::min(kChunkBytes, size - cstart) : 0;
}

// Whether staging a chunk for a write of [lo, hi) (chunk offsets) must first
// read the version on the device: a partial overwrite of installed data.
bool ReadsBeforeWrite(const ChunkState& cs, uint64_t chunk_valid, uint64_t lo, uint64_t hi) {
  return !cs.inflight && !cs.extents.empty() && !(lo == 0 && hi >= chunk_valid);
}

}  // namespace

// ------------------------------------------------------------ open / close

Result<FileSystem::Created> FileSystem::Impl::Create(uint64_t parent, std::string_view name,
                                                     uint32_t mode, int flags,
                                                     const Caller& caller) {
  KVFS_RETURN_IF_ERROR(CheckName(name));
  if (name == "." || name == "..") return Status::Error(EEXIST, "create");
  if ((mode & S_IFMT) != 0 && (mode & S_IFMT) != S_IFREG) {
    return Status::Error(EPERM, "only regular files and directories are supported");
  }
  InodeRef file;
  {
    std::lock_guard<RwLock> ns(ns_mu_);
    KVFS_ASSIGN_OR_RETURN(file, AddChild(parent, name, S_IFREG | (mode & 07777), caller));
  }
  uint64_t fh = next_fh_++;
  {
    std::lock_guard<std::mutex> l(handles_mu_);
    handles_.emplace(fh, Handle{file, flags});
  }
  std::lock_guard<std::mutex> l(file->mu);  // its name is visible: others may use it
  return Created{ToAttr(file->rec), fh};
}

Result<uint64_t> FileSystem::Impl::Open(uint64_t ino, int flags) {
  KVFS_ASSIGN_OR_RETURN(InodeRef i, GetInode(ino));
  {
    std::unique_lock<std::mutex> l(i->mu);
    if (i->is_dir()) return Status::Error(EISDIR, "open");
    // Removed between the kernel's lookup and this open (a rename-over or
    // unlink raced it): ESTALE makes the kernel look the name up again
    // (do_filp_open retries with LOOKUP_REVAL) and open what it names now.
    if (i->deleted) return Status::Error(ESTALE, "open of a removed file");
    if ((flags & O_TRUNC) && i->rec.size > 0) {
      // The kernel checked write permission for O_TRUNC, even with O_RDONLY
      // (Linux truncates then too). To size 0 nothing is staged: no failure.
      KVFS_RETURN_IF_ERROR(TruncateData(i, 0));
      i->rec.mtime_ns = i->rec.ctime_ns = NowNs();
      auto c = NewChange();
      c->inodes.push_back(i);
      Enqueue(c);
    }
    if ((flags & O_ACCMODE) != O_WRONLY && options_.prefetch != PrefetchMode::kOff) Prefetch(i);
    std::lock_guard<std::mutex> t(table_mu_);  // under i->mu: see DropLink
    i->opens++;
  }
  if ((flags & O_ACCMODE) == O_RDONLY && options_.prefetch != PrefetchMode::kOff) NoteReadOpen(ino);
  uint64_t fh = next_fh_++;
  std::lock_guard<std::mutex> l(handles_mu_);
  handles_.emplace(fh, Handle{i, flags});
  return fh;
}

Status FileSystem::Impl::Flush(uint64_t fh) {
  Handle h;
  {
    std::lock_guard<std::mutex> l(handles_mu_);
    auto it = handles_.find(fh);
    if (it == handles_.end()) return Status::Error(EBADF, "flush");
    h = it->second;
  }
  if (!h.writable()) return Status::OK();
  std::unique_lock<std::mutex> l(h.inode->mu);
  SubmitAllStaged(h.inode);
  if (h.inode->inflight_writes > 0 || h.inode->data_change_queued) {
    auto c = QueueDataChange(h.inode, false);
    Enqueue(c);
  }
  if (h.inode->write_error) {
    return Status::Error(h.inode->write_error, "write-behind of inode " +
                                                   std::to_string(h.inode->rec.ino) + " failed");
  }
  return Status::OK();
}

void FileSystem::Impl::Release(uint64_t fh) {
  Handle h;
  {
    std::lock_guard<std::mutex> l(handles_mu_);
    auto it = handles_.find(fh);
    if (it == handles_.end()) return;
    h = std::move(it->second);
    handles_.erase(it);
  }
  InodeRef i = h.inode;
  bool last;
  {
    std::lock_guard<std::mutex> t(table_mu_);
    last = --i->opens == 0;
  }
  if (!last) return;
  std::lock_guard<RwLock> ns(ns_mu_);  // orders the delete after namespace changes
  std::unique_lock<std::mutex> l(i->mu);
  SubmitAllStaged(i);
  {
    std::lock_guard<std::mutex> t(table_mu_);
    if (i->opens > 0) return;  // reopened meanwhile (only possible while it has a name)
  }
  if (i->orphan && !i->deleted) {
    // The last handle of a file unlinked while open: now it goes away.
    i->orphan = false;
    i->deleted = true;
    auto c = NewChange();
    c->deletes.push_back(i);
    c->orphan_deletes.push_back(i->rec.ino);
    l.unlock();
    Enqueue(c);
    return;
  }
  if (i->inflight_writes > 0 || i->data_change_queued) {
    auto c = QueueDataChange(i, false);
    Enqueue(c);
  }
  l.unlock();
  std::lock_guard<std::mutex> t(table_mu_);
  MaybeEvict(i);
}

void FileSystem::Impl::Fsync(uint64_t fh, std::function<void(Status)> done) {
  InodeRef i;
  {
    std::lock_guard<std::mutex> l(handles_mu_);
    auto it = handles_.find(fh);
    if (it == handles_.end()) return done(Status::Error(EBADF, "fsync"));
    i = it->second.inode;
  }
  std::unique_lock<std::mutex> l(i->mu);
  SubmitAllStaged(i);
  auto c = QueueDataChange(i, /*sync=*/true);
  const auto start = std::chrono::steady_clock::now();
  c->waiters.push_back([this, start, i, done = std::move(done)](Status st) {
    metrics_.Record(Op::kFsync, ElapsedNs(start), 0);
    int err;
    {
      std::lock_guard<std::mutex> l2(i->mu);
      err = i->write_error;
    }
    if (err) return done(Status::Error(err, "write-behind of inode " + std::to_string(i->rec.ino) + " failed"));
    done(st);
  });
  l.unlock();
  Enqueue(c);
}

Status FileSystem::Impl::Fallocate(uint64_t fh, int mode, uint64_t off, uint64_t len) {
  if (mode != 0) return Status::Error(EOPNOTSUPP, "fallocate: only mode 0 is supported");
  if (len == 0) return Status::Error(EINVAL, "fallocate: zero length");
  Handle h;
  {
    std::lock_guard<std::mutex> l(handles_mu_);
    auto it = handles_.find(fh);
    if (it == handles_.end()) return Status::Error(EBADF, "fallocate");
    h = it->second;
  }
  if (!h.writable()) return Status::Error(EBADF, "fallocate on a read-only handle");
  std::unique_lock<std::mutex> l(h.inode->mu);
  if (off + len > h.inode->rec.size) {
    uint64_t grow = off + len - h.inode->rec.size;
    if (grow > volume_.space().free_bytes) return Status::Error(ENOSPC, "fallocate");
    h.inode->rec.size = off + len;
    h.inode->rec.ctime_ns = NowNs();
    auto c = NewChange();
    c->inodes.push_back(h.inode);
    l.unlock();
    Enqueue(c);
  }
  return Status::OK();
}

// ------------------------------------------------------------ write path

device::PoolBuffer FileSystem::Impl::AcquireBuffer() {
  device::PoolBuffer b = pool_.TryAcquire();
  if (b) return b;
  // Every slot is staged or in flight: push staged chunks out so that
  // slots come back as their writes complete.
  std::vector<InodeRef> staged;
  {
    std::lock_guard<std::mutex> l(staged_mu_);
    for (auto it = staged_inodes_.begin(); it != staged_inodes_.end();) {
      if (auto i = it->second.lock()) staged.push_back(std::move(i));
      it = staged_inodes_.erase(it);
    }
  }
  for (auto& i : staged) {
    std::lock_guard<std::mutex> l(i->mu);
    SubmitAllStaged(i);
  }
  return pool_.Acquire();
}

// Gives chunk `ci` a staged buffer holding its current content, reserving
// device space for at least `write_hi` bytes of it. May drop and retake
// `lock` (to wait for a buffer or for space). REQUIRES: lock holds inode->mu.
Status FileSystem::Impl::StageChunk(const InodeRef& inode, std::unique_lock<std::mutex>& lock,
                                    uint64_t ci, uint64_t write_lo, uint64_t write_hi) {
  device::PoolBuffer buf = pool_.TryAcquire();
  if (!buf) {
    lock.unlock();
    buf = AcquireBuffer();
    lock.lock();
    if (inode->chunks[ci].staged) return Status::OK();  // staged by another writer meanwhile
  }
  const uint64_t cstart = ci * kChunkBytes;
  // Reserve space now so that a full volume fails write() with ENOSPC.
  uint64_t want = kChunkBytes;
  auto alloc = volume_.Allocate(want);
  if (!alloc.ok() && alloc.status().code() == ENOSPC) {
    want = AlignUp(write_hi, kBlockSize);
    alloc = volume_.Allocate(want);
    if (!alloc.ok() && alloc.status().code() == ENOSPC) {
      // Space freed by unlinks becomes free when their commit lands.
      lock.unlock();
      committer_->Drain(false).ignore();  // errors surface through the retry
      lock.lock();
      if (inode->chunks[ci].staged) return Status::OK();
      alloc = volume_.Allocate(want);
    }
  }
  if (!alloc.ok()) return alloc.status();

  auto cb = std::make_shared<ChunkBuf>();
  cb->buf = std::move(buf);
  cb->alloc = std::move(alloc).value();
  char* data = cb->buf.data();
  for (;;) {
    ChunkState& cs = inode->chunks[ci];
    if (cs.staged) {  // another writer staged it while the lock was dropped
      FreeNow(cb->alloc);
      return Status::OK();
    }
    const uint64_t size = inode->rec.size;
    const uint64_t chunk_valid = ChunkValid(size, cstart);
    cb->clean = 0;
    if (cs.inflight) {
      std::memcpy(data, cs.inflight->buf.data(), cs.inflight->valid);
      cb->clean = cs.inflight->valid;
      cb->valid = std::max(cs.inflight->valid, chunk_valid);
    } else if (ReadsBeforeWrite(cs, chunk_valid, write_lo, write_hi)) {
      // Partial overwrite of data on the device: read it first (rare for KV
      // workloads, which write whole files). Never wait for I/O holding the
      // inode lock: completions take it. Retry if the chunk changed meanwhile.
      std::vector<index::FileExtent> extents = cs.extents;
      const uint64_t seq = cs.installed_seq;
      std::memset(data, 0, kChunkBytes);  // holes between the extents read as zeros
      cb->clean = kChunkBytes;
      lock.unlock();
      Status st;
      for (const index::FileExtent& fe : extents) {
        st = sched_->ReadSync(io::Lane::kRead, fe.ext.device, fe.ext.byte_off,
                              data + (fe.file_off - cstart), fe.ext.len);
        if (st.ok() && verifier_.enabled()) {
          st = verifier_.Check(inode->rec.ino, fe, data + (fe.file_off - cstart));
        }
        if (!st.ok()) break;
      }
      lock.lock();
      if (!st.ok()) {
        FreeNow(cb->alloc);
        return st.Annotate("reading chunk for a partial overwrite");
      }
      ChunkState& now = inode->chunks[ci];
      if (now.staged || now.inflight || now.installed_seq != seq || now.extents != extents ||
          inode->rec.size != size) {
        continue;
      }
      if (chunk_valid < kChunkBytes) std::memset(data + chunk_valid, 0, kChunkBytes - chunk_valid);
      cb->valid = chunk_valid;
    } else {
      cb->valid = chunk_valid;  // a hole or a full overwrite: zeros so far
    }
    break;
  }
  ChunkState& cs = inode->chunks[ci];
  cs.staged = std::move(cb);
  std::lock_guard<std::mutex> l(staged_mu_);
  staged_inodes_[inode->rec.ino] = inode;
  return Status::OK();
}

bool FileSystem::Impl::WriteMayWait(uint64_t fh, uint64_t off, size_t len) {
  Handle h;
  {
    std::lock_guard<std::mutex> l(handles_mu_);
    auto it = handles_.find(fh);
    if (it == handles_.end()) return false;  // the write fails at once
    h = it->second;
  }
  if (!h.writable() || len == 0) return false;
  std::lock_guard<std::mutex> l(h.inode->mu);
  if (h.flags & O_APPEND) off = h.inode->rec.size;
  const uint64_t end = off + len;
  size_t unstaged = 0;
  for (uint64_t ci = off / kChunkBytes; ci * kChunkBytes < end; ++ci) {
    auto it = h.inode->chunks.find(ci);
    if (it != h.inode->chunks.end() && it->second.staged) continue;
    ++unstaged;
    if (it == h.inode->chunks.end()) continue;
    const uint64_t cstart = ci * kChunkBytes;
    const uint64_t lo = off > cstart ? off - cstart : 0;
    const uint64_t hi = std::min(end - cstart, kChunkBytes);
    if (ReadsBeforeWrite(it->second, ChunkValid(h.inode->rec.size, cstart), lo, hi)) return true;
  }
  if (unstaged == 0) return false;
  // StageChunk waits for commits to free space when the volume is full.
  if (volume_.space().free_bytes < unstaged * kChunkBytes) return true;
  // Other writers take slots between this check and the write (nothing is
  // reserved): a margin keeps the receiver from waiting on a pool that is
  // nearly out.
  return unstaged + kWriteSlotMargin > pool_.free_slots();
}

Result<size_t> FileSystem::Impl::Write(uint64_t fh, uint64_t off, std::span<const char> data) {
  const auto start = std::chrono::steady_clock::now();
  auto r = WriteInner(fh, off, data);
  metrics_.Record(Op::kWrite, ElapsedNs(start), r.ok() ? *r : 0);
  if (!r.ok()) metrics_.Error(r.status().code());
  return r;
}

Result<size_t> FileSystem::Impl::WriteInner(uint64_t fh, uint64_t off,
                                            std::span<const char> data) {
  Handle h;
  {
    std::lock_guard<std::mutex> l(handles_mu_);
    auto it = handles_.find(fh);
    if (it == handles_.end()) return Status::Error(EBADF, "write");
    h = it->second;
  }
  if (!h.writable()) return Status::Error(EBADF, "write on a read-only handle");
  if (h.flags & O_APPEND) {
    std::lock_guard<std::mutex> l(h.inode->mu);
    off = h.inode->rec.size;
  }
  InodeRef i = h.inode;
  std::unique_lock<std::mutex> lock(i->mu);
  const uint64_t end = off + data.size();
  uint64_t pos = off;
  while (pos < end) {
    const uint64_t ci = pos / kChunkBytes;
    const uint64_t cstart = ci * kChunkBytes;
    const uint64_t lo = pos - cstart;
    const uint64_t hi = std::min(end - cstart, kChunkBytes);
    if (!i->chunks[ci].staged) {
      Status st = StageChunk(i, lock, ci, lo, hi);
      if (!st.ok()) {
        if (pos > off) break;  // report the bytes already accepted
        return st;
      }
    }
    ChunkBuf& cb = *i->chunks[ci].staged;
    // Grow the reservation if the chunk was staged with less space.
    uint64_t need = AlignUp(std::max(hi, cb.valid), kBlockSize);
    uint64_t have = TotalLen(cb.alloc);
    if (need > have) {
      auto more = volume_.Allocate(need - have);
      if (!more.ok()) {
        if (pos > off) break;
        return more.status();
      }
      cb.alloc.insert(cb.alloc.end(), more->begin(), more->end());
    }
    cb.ZeroTo(lo);  // a gap before this write reads as zeros
    std::memcpy(cb.buf.data() + lo, data.data() + (pos - off), hi - lo);
    cb.clean = std::max(cb.clean, hi);
    cb.valid = std::max(cb.valid, hi);
    pos = cstart + hi;
    if (pos > i->rec.size) i->rec.size = pos;
    // A chunk written to its end goes to the device now (write-behind).
    if (hi == kChunkBytes) SubmitChunk(i, ci);
  }
  i->rec.mtime_ns = i->rec.ctime_ns = NowNs();
  return static_cast<size_t>(pos - off);
}

void FileSystem::Impl::SubmitAllStaged(const InodeRef& inode) {
  std::vector<uint64_t> staged;
  for (auto& [ci, cs] : inode->chunks) {
    if (cs.staged) staged.push_back(ci);
  }
  for (uint64_t ci : staged) SubmitChunk(inode, ci);
}

// Sends the staged version of chunk `ci` to its reserved extents.
// REQUIRES: inode->mu held; the chunk is staged.
void FileSystem::Impl::SubmitChunk(const InodeRef& inode, uint64_t ci) {
  ChunkState& cs = inode->chunks[ci];
  std::shared_ptr<ChunkBuf> cb = std::move(cs.staged);
  cs.staged.reset();
  const uint64_t bytes = AlignUp(cb->valid, kBlockSize);
  cb->ZeroTo(bytes);  // the device gets zeros, not garbage, after the content
  // Keep exactly `bytes` of the reservation; return the rest.
  std::vector<Extent> keep, spare;
  uint64_t left = bytes;
  for (const Extent& e : cb->alloc) {
    if (left == 0) {
      spare.push_back(e);
    } else if (e.len <= left) {
      keep.push_back(e);
      left -= e.len;
    } else {
      keep.push_back({e.device, e.byte_off, left});
      spare.push_back({e.device, e.byte_off + left, e.len - left});
      left = 0;
    }
  }
  FreeNow(spare);
  cb->alloc = std::move(keep);
  if (bytes == 0) {
    // Nothing left in the chunk (truncated to its start): its old data goes.
    for (const auto& fe : cs.extents) inode->free_pending.push_back(fe.ext);
    cs.extents.clear();
    if (cs.empty()) inode->chunks.erase(ci);
    return;
  }
  cb->seq = ++inode->chunk_seq;
  cb->trunc_epoch = inode->trunc_epoch;
  cs.inflight = cb;
  inode->inflight_writes++;
  {
    std::lock_guard<std::mutex> t(table_mu_);
    inode->pending_changes++;  // pinned until the write completes
  }
  struct Pending {
    std::atomic<size_t> left;
    std::mutex mu;
    Status first;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = cb->alloc.size();
  std::vector<device::IoRequest> reqs;
  uint64_t pos = 0;
  for (const Extent& e : cb->alloc) {
    device::IoRequest r;
    r.op = device::IoOp::kWrite;
    r.device = e.device;
    r.byte_off = e.byte_off;
    r.buf = cb->buf.data() + pos;
    r.len = e.len;
    r.done = [this, inode, ci, cb, pending](Status st) {
      if (!st.ok()) {
        std::lock_guard<std::mutex> l(pending->mu);
        if (pending->first.ok()) pending->first = st;
      }
      if (pending->left.fetch_sub(1) == 1) OnChunkWritten(inode, ci, cb, pending->first);
    };
    reqs.push_back(std::move(r));
    pos += e.len;
  }
  sched_->Submit(io::Lane::kWrite, reqs);
}

void FileSystem::Impl::OnChunkWritten(const InodeRef& inode, uint64_t ci,
                                      std::shared_ptr<ChunkBuf> cb, Status st) {
  // Even a failed write makes the next commit flush first: after a power
  // cut the flush fails, and nothing more is committed.
  committer_->NoteDataWritten();
  std::vector<std::shared_ptr<Change>> gates;
  std::shared_ptr<Change> data_change;
  std::vector<Extent> free_now;
  {
    std::lock_guard<std::mutex> l(inode->mu);
    inode->inflight_writes--;
    auto it = inode->chunks.find(ci);
    bool current = it != inode->chunks.end() && !inode->deleted &&
                   cb->trunc_epoch == inode->trunc_epoch && cb->seq > it->second.installed_seq;
    if (!st.ok()) {
      if (!inode->write_error) {
        inode->write_error = st.code();
        spdlog::error("write-behind of inode {} at file offset {} failed: {}", inode->rec.ino,
                      ci * kChunkBytes, st.ToString());
      }
      free_now = cb->alloc;
      if (it != inode->chunks.end() && cb->seq > it->second.installed_seq &&
          cb->trunc_epoch == inode->trunc_epoch) {
        it->second.failed = true;
      }
    } else if (current) {
      ChunkState& cs = it->second;
      for (const auto& fe : cs.extents) inode->free_pending.push_back(fe.ext);
      cs.extents.clear();
      uint64_t pos = 0;
      for (const Extent& e : cb->alloc) {
        index::FileExtent fe;
        fe.file_off = ci * kChunkBytes + pos;
        fe.ext = e;
        fe.crc32c = Crc32c(cb->buf.data() + pos, e.len);
        cs.extents.push_back(fe);
        pos += e.len;
      }
      cs.installed_seq = cb->seq;
      cs.failed = false;
      cache_->Erase(inode->token, ci);  // an older version's bytes
      if (!inode->data_change_queued) {
        inode->data_change_queued = true;
        data_change = NewChange();
        data_change->inodes.push_back(inode);
      }
    } else {
      free_now = cb->alloc;  // superseded or truncated away: never indexed
    }
    if (it != inode->chunks.end()) {
      if (it->second.inflight == cb) it->second.inflight.reset();
      if (it->second.empty()) inode->chunks.erase(it);
    }
    if (inode->inflight_writes == 0) gates.swap(inode->gated);
  }
  FreeNow(free_now);
  if (data_change) Enqueue(data_change);
  for (auto& g : gates) committer_->OpenGate(g);
  std::lock_guard<std::mutex> t(table_mu_);
  inode->pending_changes--;
  MaybeEvict(inode);
}

// Cuts (or grows) the file to `new_size`. Chunks past it are dropped (their
// extents freed once the new size is committed); the chunk that straddles
// it is restaged with zeros past the cut so a later grow reads zeros. On
// error (no staging memory or space for that chunk, its old bytes
// unreadable) nothing has changed. May drop and retake inode->mu.
// REQUIRES: inode->mu held.
Status FileSystem::Impl::TruncateData(const InodeRef& inode, uint64_t new_size) {
  const uint64_t cut = new_size % kChunkBytes;
  const uint64_t ci = new_size / kChunkBytes;
  if (new_size < inode->rec.size && cut != 0) {
    auto it = inode->chunks.find(ci);
    if (it != inode->chunks.end() && !it->second.staged) {
      // The chunk the cut falls in keeps its head: stage it (reading the
      // old bytes) before anything is dropped. Without a buffer, space or
      // the old bytes, the truncate fails and the file stays as it was.
      std::unique_lock<std::mutex> relock(inode->mu, std::adopt_lock);
      Status st = StageChunk(inode, relock, ci, 0, cut);
      relock.release();
      if (!st.ok()) return st.Annotate("truncate of inode " + std::to_string(inode->rec.ino));
    }
  }
  const uint64_t old_size = inode->rec.size;  // StageChunk may have let writers in
  if (new_size < old_size) {
    inode->trunc_epoch++;  // in-flight versions of dropped chunks are obsolete
    const uint64_t first_dropped = AlignUp(new_size, kChunkBytes) / kChunkBytes;
    for (auto it = inode->chunks.lower_bound(first_dropped); it != inode->chunks.end();) {
      for (auto& fe : it->second.extents) inode->free_pending.push_back(fe.ext);
      if (it->second.staged) FreeNow(it->second.staged->alloc);
      cache_->Erase(inode->token, it->first);
      it = inode->chunks.erase(it);
    }
    // Keep surviving in-flight chunks current despite the new epoch.
    for (auto& [c, cs] : inode->chunks) {
      if (cs.inflight) cs.inflight->trunc_epoch = inode->trunc_epoch;
    }
    auto it = inode->chunks.find(ci);
    if (cut != 0 && it != inode->chunks.end() && it->second.staged) {
      ChunkBuf& cb = *it->second.staged;
      cb.clean = std::min(cb.clean, cut);  // the cut bytes are garbage now
      cb.valid = std::min(cb.valid, cut);
    }
  }
  inode->rec.size = new_size;
  return Status::OK();
}

// ------------------------------------------------------------ read path

void FileSystem::Impl::Read(uint64_t fh, uint64_t off, size_t size, ReadDone user_done,
                            CancelFlag cancel) {
  const auto start = std::chrono::steady_clock::now();
  ReadDone done = [this, start, user_done = std::move(user_done)](Status st,
                                                                 std::span<const char> d) {
    metrics_.Record(Op::kRead, ElapsedNs(start), d.size());
    if (!st.ok()) metrics_.Error(st.code());
    user_done(st, d);
  };
  InodeRef i;
  {
    std::lock_guard<std::mutex> l(handles_mu_);
    auto it = handles_.find(fh);
    if (it == handles_.end()) return done(Status::Error(EBADF, "read"), {});
    i = it->second.inode;
  }
  ReadPlan plan;
  std::shared_ptr<LargeBuffer> out;
  uint64_t len;
  std::shared_ptr<CachedChunk> whole;  // holds all of [off, off + len)
  {
    std::lock_guard<std::mutex> l(i->mu);
    const uint64_t fsize = i->rec.size;
    if (off >= fsize || size == 0) return done(Status::OK(), {});
    len = std::min<uint64_t>(size, fsize - off);
    whole = CachedWhole(i, off, len);
    if (!whole) {
      // A block of slack: the device read of the file's last block lands whole.
      const uint64_t cap = AlignUp(len, kBlockSize) + kBlockSize;
      out = std::make_shared<LargeBuffer>(LargeBuffer::Allocate(cap));
      if (!*out) return done(Status::Error(ENOMEM, "read buffer"), {});
      PlanRead(i, off, len, out->get(), cap, &plan);
      if (plan.fail.ok() && plan.has_work()) {
        std::lock_guard<std::mutex> t(table_mu_);
        i->pending_changes++;  // pinned until the reads complete
      }
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
  ExecuteRead(i, std::move(plan), dst, std::move(cancel),
              [out = std::move(out), len, done = std::move(done)](Status st) {
                if (!st.ok()) return done(st, {});
                done(Status::OK(), std::span<const char>(out->get(), len));
              });
}

void FileSystem::Impl::WhenLoaded(const std::shared_ptr<CachedChunk>& c,
                                  std::function<void(bool ok)> fn) {
  // Its requests carry the entry as their group (Prefetch).
  if (c->WaitIfLoading(fn)) {  // a copy: `fn` runs here if it is not loading
    sched_->Promote(c.get());
  } else {
    fn(c->state() == CachedChunk::State::kReady);
  }
}

std::shared_ptr<CachedChunk> FileSystem::Impl::CachedWhole(const InodeRef& i, uint64_t off,
                                                           uint64_t len) {
  const uint64_t ci = off / kChunkBytes;
  if ((off + len - 1) / kChunkBytes != ci || verifier_.enabled()) return nullptr;
  auto it = i->chunks.find(ci);
  if (it == i->chunks.end()) return nullptr;
  const ChunkState& cs = it->second;
  if (cs.staged || cs.inflight || cs.failed || cs.extents.empty()) return nullptr;
  // A miss is counted by the PlanRead that follows.
  std::shared_ptr<CachedChunk> c = cache_->Get(i->token, ci, cs.installed_seq, false);
  if (!c || c->state() == CachedChunk::State::kFailed) return nullptr;
  if (off + len > ci * kChunkBytes + c->capacity) return nullptr;  // ends in a hole
  return c;
}

// ------------------------------------------------------------ prefetch

std::shared_ptr<CachedChunk> FileSystem::Impl::StartChunkLoad(const InodeRef& i, uint64_t ci,
                                                              const ChunkState& cs, bool prefetch) {
  const uint64_t cstart = ci * kChunkBytes;
  // The chunk's bytes each extent holds, in order; the entry ends where the
  // last one does.
  std::vector<std::pair<uint64_t, uint64_t>> covered;
  uint64_t capacity = 0;
  for (const auto& fe : cs.extents) {
    covered.push_back({fe.file_off - cstart, fe.file_off - cstart + fe.ext.len});
    capacity = std::max(capacity, covered.back().second);
  }
  auto entry = cache_->StartLoad(i->token, ci, cs.installed_seq, capacity, prefetch);
  if (!entry) return nullptr;
  // Cache memory is reused, not fresh: what no extent covers (a hole) must
  // read as zeros.
  std::sort(covered.begin(), covered.end());
  uint64_t pos = 0;
  for (const auto& [a, b] : covered) {
    if (a > pos) std::memset(entry->data.get() + pos, 0, a - pos);
    pos = std::max(pos, b);
  }
  return entry;
}

void FileSystem::Impl::PromoteWaitedFor(std::vector<std::shared_ptr<CachedChunk>>* entries) {
  // A reader registers its wait and then promotes; this runs after the
  // submission: one of the two finds the other's work done.
  for (const auto& e : *entries) {
    if (e->has_waiters()) sched_->Promote(e.get());
  }
  entries->clear();
}

uint64_t FileSystem::Impl::Prefetch(const InodeRef& inode, std::vector<device::IoRequest>* batch,
                                    std::vector<std::shared_ptr<CachedChunk>>* entries) {
  if (!inode->is_reg() || inode->deleted) return 0;
  if (inode->rec.size > options_.prefetch_file_max_bytes) return 0;
  uint64_t bytes = 0;
  std::vector<device::IoRequest> reqs;
  int loads = 0;
  for (auto& [ci, cs] : inode->chunks) {
    if (cs.staged || cs.inflight || cs.extents.empty()) continue;
    if (cache_->unused_prefetch_bytes() >= options_.prefetch_budget_bytes) break;
    const uint64_t cstart = ci * kChunkBytes;
    auto entry = StartChunkLoad(inode, ci, cs, true);
    if (!entry) continue;  // cached already, or no room
    ++loads;
    bytes += entry->capacity;
    if (entries != nullptr) entries->push_back(entry);
    auto left = std::make_shared<std::atomic<size_t>>(cs.extents.size());
    auto ok = std::make_shared<std::atomic<bool>>(true);
    for (const auto& fe : cs.extents) {
      device::IoRequest r;
      r.op = device::IoOp::kRead;
      r.device = fe.ext.device;
      r.byte_off = fe.ext.byte_off;
      r.buf = entry->data.get() + (fe.file_off - cstart);
      r.len = fe.ext.len;
      r.group = entry.get();  // a reader that waits for it promotes it
      r.done = [this, inode, entry, left, ok, fe, buf = r.buf,
                start = std::chrono::steady_clock::now()](Status st) {
        if (st.ok() && verifier_.enabled()) {
          st = verifier_.Check(inode->rec.ino, fe, static_cast<const char*>(buf));
        }
        if (!st.ok()) *ok = false;
        if (left->fetch_sub(1) != 1) return;
        metrics_.Record(Op::kPrefetch, ElapsedNs(start), entry->capacity);
        if (!ok->load()) metrics_.Error(EIO);
        entry->Finish(ok->load());
        FinishDeviceRead(inode);
      };
      reqs.push_back(std::move(r));
    }
  }
  if (loads == 0) return 0;
  inode->reads_inflight += loads;
  {
    std::lock_guard<std::mutex> t(table_mu_);
    inode->pending_changes += loads;  // pinned until the loads complete
  }
  if (batch != nullptr) {
    for (device::IoRequest& r : reqs) batch->push_back(std::move(r));
  } else {
    sched_->Submit(io::Lane::kPrefetch, reqs);
  }
  return bytes;
}

}  // namespace kvfs::fs
