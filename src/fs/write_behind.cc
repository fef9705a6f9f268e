// Write-behind (DESIGN.md "Semantics the connectors rely on"): write()
// copies into a chunk's staging buffer; a chunk written to its end, or any
// staged chunk at flush/close/fsync, is submitted to its reserved extents;
// when its writes complete the new extents are installed and a change
// capturing them is queued (changes.cc). Also truncate, which drops and
// restages chunks.
#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "common/crc32c.h"
#include "common/format.h"
#include "common/kill_point.h"
#include "fs/chunk_cache.h"
#include "fs/countdown.h"
#include "fs/file_system_impl.h"
#include "fs/killpriv.h"

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

device::PoolBuffer FileSystem::Impl::AcquireBuffer() {
  device::PoolBuffer b = volume_.buffers().TryAcquire();
  if (b) return b;
  // Every slot is staged or in flight: push staged chunks out so that
  // slots come back as their writes complete.
  for (const InodeRef& i : staged_.Take()) {
    MutexLock l(i->mu());
    SubmitAllStaged(i);
  }
  return volume_.buffers().Acquire();
}

void InstallExtents(ChunkState& cs, uint64_t ci, const std::vector<Extent>& alloc,
                    const std::vector<uint32_t>& crcs) {
  uint64_t pos = 0;
  for (size_t e = 0; e < alloc.size(); ++e) {
    index::FileExtent fe;
    fe.file_off = ci * kChunkBytes + pos;
    fe.ext = alloc[e];
    fe.crc32c = crcs[e];
    cs.extents.push_back(fe);
    pos += alloc[e].len;
  }
}

// The caller's lock, if it gave one, let go of and taken again around a
// wait (a conditional the thread-safety analysis cannot follow).
static void LetGo(Mutex* lock) NO_THREAD_SAFETY_ANALYSIS {
  if (lock) lock->unlock();
}
static void TakeBack(Mutex* lock) NO_THREAD_SAFETY_ANALYSIS {
  if (lock) lock->lock();
}

Status FileSystem::Impl::WithSpace(uint64_t bytes, const std::function<Status()>& reserve,
                                   Mutex* lock) {
  Status st = reserve();
  if (st.code() != ENOSPC) {
    if (st.ok() && eviction_.evictor()) eviction_.evictor()->Allocated();
    return st;
  }
  // Space freed by unlinks becomes free when their commit lands.
  LetGo(lock);
  committer_->Drain(false).ignore();  // errors surface through the retry
  TakeBack(lock);
  st = reserve();
  if (Evictor* evictor = eviction_.evictor()) {
    if (st.ok()) {
      evictor->Allocated();
    } else if (st.code() == ENOSPC) {
      // Still full: wait (bounded) for eviction to make room.
      LetGo(lock);
      st = evictor->ReserveWaiting(
          [&] {
            TakeBack(lock);
            Status r = reserve();
            LetGo(lock);
            return r;
          },
          bytes);
      TakeBack(lock);
    }
  }
  return st;
}

// Gives chunk `ci` a staged buffer holding its current content, reserving
// device space for at least `write_hi` bytes of it. May drop and retake
// the inode's lock (to wait for a buffer or for space).
Status FileSystem::Impl::StageChunk(const InodeRef& inode, uint64_t ci, uint64_t write_lo,
                                    uint64_t write_hi) {
  device::PoolBuffer buf = volume_.buffers().TryAcquire();
  if (!buf) {
    inode->mu().unlock();
    buf = AcquireBuffer();
    inode->mu().lock();
    if (inode->chunks[ci].staged) return Status::OK();  // staged by another writer meanwhile
  }
  const uint64_t cstart = ci * kChunkBytes;
  // Reserve space now so that a full volume fails write() with ENOSPC: a
  // whole chunk, or if that is not free, what this write needs.
  uint64_t want = kChunkBytes;
  std::vector<Extent> alloc;
  Status reserved = WithSpace(
      kChunkBytes,
      [&]() -> Status {
        const volume::PlacementHint hint{inode->ino, ci};
        auto a = volume_.Allocate(want, hint);
        if (!a.ok() && a.status().code() == ENOSPC && want == kChunkBytes) {
          want = AlignUp(write_hi, kBlockSize);
          a = volume_.Allocate(want, hint);
        }
        if (!a.ok()) return a.status();
        alloc = std::move(a).value();
        return Status::OK();
      },
      &inode->mu());
  if (inode->chunks[ci].staged) {  // staged by another writer while the lock was dropped
    FreeNow(alloc);
    return Status::OK();
  }
  KVFS_RETURN_IF_ERROR(reserved);

  auto cb = std::make_shared<ChunkBuf>();
  cb->buf = std::move(buf);
  cb->alloc = std::move(alloc);
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
      inode->mu().unlock();
      Status st;
      for (const index::FileExtent& fe : extents) {
        st = sched_->ReadSync(io::Lane::kRead, fe.ext.device, fe.ext.byte_off,
                              data + (fe.file_off - cstart), fe.ext.len);
        if (st.ok() && verifier_.enabled()) {
          st = verifier_.Check(inode->rec.ino, fe, data + (fe.file_off - cstart));
        }
        if (!st.ok()) break;
      }
      inode->mu().lock();
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
  staged_.Add(inode);
  return Status::OK();
}

bool FileSystem::Impl::WriteMayWait(uint64_t fh, uint64_t off, size_t len) {
  std::optional<Handle> found = handles_.Get(fh);
  if (!found) return false;  // the write fails at once
  const Handle& h = *found;
  // A writer served from file memory writes it out at flush, fsync and
  // close: as long as a write.
  if (h.memory && h.writable()) return true;
  if (!h.writable() || len == 0) return false;
  MutexLock l(h.inode->mu());
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
  return unstaged + kWriteSlotMargin > volume_.buffers().free_slots();
}

Result<size_t> FileSystem::Impl::Write(uint64_t fh, uint64_t off, std::span<const char> data,
                                       KillPriv* kill) {
  std::optional<Handle> found = handles_.Get(fh);
  if (!found) return Status::Error(EBADF, "write");
  const Handle& h = *found;
  if (!h.writable()) return Status::Error(EBADF, "write on a read-only handle");
  if (h.flags & O_APPEND) {
    MutexLock l(h.inode->mu());
    off = h.inode->rec.size;
  }
  InodeRef i = h.inode;
  MutexLock lock(i->mu());
  const uint64_t end = off + data.size();
  uint64_t pos = off;
  while (pos < end) {
    const uint64_t ci = pos / kChunkBytes;
    const uint64_t cstart = ci * kChunkBytes;
    const uint64_t lo = pos - cstart;
    const uint64_t hi = std::min(end - cstart, kChunkBytes);
    if (!i->chunks[ci].staged) {
      Status st = StageChunk(i, ci, lo, hi);
      if (!st.ok()) {
        if (pos > off) break;  // report the bytes already accepted
        return st;
      }
    }
    ChunkBuf& cb = *i->chunks[ci].staged;
    // Grow the reservation if the chunk was staged with less space.
    const uint64_t need = AlignUp(std::max(hi, cb.valid), kBlockSize);
    const uint64_t have = TotalLen(cb.alloc);
    if (need > have) {
      const std::shared_ptr<ChunkBuf> staged = i->chunks[ci].staged;  // compared after the wait
      std::vector<Extent> more;
      Status st = WithSpace(
          need - have,
          [&]() -> Status {
            auto a = volume_.Allocate(need - have, volume::PlacementHint{i->ino, ci});
            if (!a.ok()) return a.status();
            more = std::move(a).value();
            return Status::OK();
          },
          &i->mu());
      // The lock may have been dropped for the wait: the chunk may have
      // been pushed out, truncated or restaged meanwhile. Look again.
      if (i->chunks[ci].staged == staged) {
        staged->alloc.insert(staged->alloc.end(), more.begin(), more.end());
      } else {
        FreeNow(more);
      }
      if (!st.ok()) {
        if (pos > off) break;
        return st;
      }
      continue;
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
  // Committed with the data (the capture at close carries the mode).
  if (kill) i->rec.mode = KillSuidGidFor(i->rec.mode, i->rec.gid, *kill);
  KVFS_KILL_POINT("WriteBehind::Staged");  // accepted, only in staging memory
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
// REQUIRES: the chunk is staged.
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
  inode->data.BeginWrite();
  // The chunk's writes (one per extent); the inode is pinned until the
  // last completes.
  struct Writes {
    Countdown parts;
    InodePin pin;
  };
  auto writes = std::make_shared<Writes>();
  writes->parts.Reset(cb->alloc.size());
  writes->pin = table_.Pin(inode);
  std::vector<device::IoRequest> reqs;
  uint64_t pos = 0;
  for (const Extent& e : cb->alloc) {
    // Each write holds the version it writes from until it completes.
    reqs.push_back(FileData::WriteFrom(cb, cb->buf.data() + pos, e.device, e.byte_off, e.len,
                                       [this, ci, cb, writes](Status st) {
                                         if (writes->parts.Finish(st)) {
                                           OnChunkWritten(std::move(writes->pin), ci, cb,
                                                          writes->parts.first());
                                         }
                                       }));
    pos += e.len;
  }
  sched_->Submit(io::Lane::kWrite, reqs);
  KVFS_KILL_POINT("WriteBehind::Submitted");  // device writes in flight
}

void FileSystem::Impl::OnChunkWritten(InodePin pin, uint64_t ci, std::shared_ptr<ChunkBuf> cb,
                                      Status st) {
  const InodeRef& inode = pin.ref();
  KVFS_KILL_POINT("WriteBehind::ChunkWritten");  // on the device, named by nothing yet
  // Even a failed write makes the next commit flush first: after a power
  // cut the flush fails, and nothing more is committed.
  committer_->NoteDataWritten();
  std::vector<std::shared_ptr<Change>> gates;
  std::shared_ptr<Change> data_change;
  std::vector<Extent> free_now;
  {
    MutexLock l(inode->mu());
    gates = inode->data.EndWrite();
    auto it = inode->chunks.find(ci);
    bool current = it != inode->chunks.end() && !inode->deleted &&
                   cb->trunc_epoch == inode->trunc_epoch && cb->seq > it->second.installed_seq;
    if (!st.ok()) {
      if (inode->data.NoteWriteError(st.code())) {
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
      std::vector<uint32_t> crcs;
      uint64_t pos = 0;
      for (const Extent& e : cb->alloc) {
        crcs.push_back(Crc32c(cb->buf.data() + pos, e.len));
        pos += e.len;
      }
      InstallExtents(cs, ci, cb->alloc, crcs);
      cs.installed_seq = cb->seq;
      cs.failed = false;
      ram_->chunks().Erase(inode->token, ci);  // an older version's bytes
      if (inode->data.NoteInstalled()) {
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
  }
  FreeNow(free_now);
  if (data_change) Enqueue(data_change);
  for (auto& g : gates) committer_->OpenGate(g);
  KVFS_KILL_POINT("WriteBehind::ChunkInstalled");  // its change queued, gates opened
  // `pin` goes here: the inode may leave the table.
}

// Cuts (or grows) the file to `new_size`. Chunks past it are dropped (their
// extents freed once the new size is committed); the chunk that straddles
// it is restaged with zeros past the cut so a later grow reads zeros. On
// error (no staging memory or space for that chunk, its old bytes
// unreadable) nothing has changed. May drop and retake inode->mu().
Status FileSystem::Impl::TruncateData(const InodeRef& inode, uint64_t new_size) {
  const uint64_t cut = new_size % kChunkBytes;
  const uint64_t ci = new_size / kChunkBytes;
  if (new_size < inode->rec.size && cut != 0) {
    auto it = inode->chunks.find(ci);
    if (it != inode->chunks.end() && !it->second.staged) {
      // The chunk the cut falls in keeps its head: stage it (reading the
      // old bytes) before anything is dropped. Without a buffer, space or
      // the old bytes, the truncate fails and the file stays as it was.
      Status st = StageChunk(inode, ci, 0, cut);
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
      ram_->chunks().Erase(inode->token, it->first);
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

}  // namespace kvfs::fs
