// Write-behind (DESIGN.md "Semantics the connectors rely on"): write()
// copies into a chunk's staging buffer; a chunk written to its end, or any
// staged chunk at flush/close/fsync, is submitted to its reserved extents;
// when its writes complete the new extents are installed and a change
// capturing them is queued (changes.cc). Also truncate, which drops chunks
// and writes the head of the one it cuts.
#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/crc32c.h"
#include "common/format.h"
#include "common/kill_point.h"
#include "fs/chunk_cache.h"
#include "fs/countdown.h"
#include "fs/file_system_impl.h"
#include "fs/killpriv.h"

namespace kvfs::fs {

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

// The caller's lock, if it gave one, let go of and taken again around a
// wait (a conditional the thread-safety analysis cannot follow).
static void LetGo(Mutex* lock) NO_THREAD_SAFETY_ANALYSIS {
  if (lock) lock->unlock();
}
static void TakeBack(Mutex* lock) NO_THREAD_SAFETY_ANALYSIS {
  if (lock) lock->lock();
}

Status FileSystem::Impl::WithSpace(uint64_t bytes, const std::function<Status()>& reserve,
                                   Mutex* lock, bool may_wait) {
  Status st = reserve();
  if (st.code() != ENOSPC) {
    if (st.ok() && eviction_.evictor()) eviction_.evictor()->Allocated();
    return st;
  }
  if (!may_wait) return Status::Error(kWouldWait, "the volume is full: waits for space");
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

Status FileSystem::Impl::AllocateWithSpace(uint64_t bytes, volume::PlacementHint hint,
                                           std::vector<Extent>* out, Mutex* lock, bool may_wait) {
  return WithSpace(
      bytes,
      [&]() -> Status {
        auto a = volume_.Allocate(bytes, hint);
        if (!a.ok()) return a.status();
        *out = std::move(a).value();
        return Status::OK();
      },
      lock, may_wait);
}

// Gives chunk `ci` a staged buffer holding its current content, reserving
// device space for at least `write_hi` bytes of it. May drop and retake
// the inode's lock (to wait for a buffer or for space, and to read the old
// bytes of a partly overwritten chunk: never wait for I/O holding it,
// completions take it).
Status FileSystem::Impl::StageChunk(const InodeRef& inode, uint64_t ci, uint64_t write_lo,
                                    uint64_t write_hi, bool may_wait) {
  device::PoolBuffer buf = volume_.buffers().TryAcquire();
  if (!buf) {
    if (!may_wait) return Status::Error(kWouldWait, "every staging buffer is in use");
    inode->mu().unlock();
    buf = AcquireBuffer();
    inode->mu().lock();
    if (inode->data.Staged(ci)) return Status::OK();  // staged by another writer meanwhile
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
      &inode->mu(), may_wait);
  if (inode->data.Staged(ci)) {  // staged by another writer while the lock was dropped
    FreeNow(alloc);
    return Status::OK();
  }
  KVFS_RETURN_IF_ERROR(reserved);

  auto cb = std::make_shared<ChunkBuf>();
  cb->buf = std::move(buf);
  cb->alloc = std::move(alloc);
  char* data = cb->buf.data();
  InstalledChunk old;
  uint64_t size = inode->rec.size;
  FileData::Staging staging = inode->data.Stage(ci, cb, size, write_lo, write_hi, &old);
  if (staging == FileData::Staging::kReadOldBytes && !may_wait) {
    FreeNow(cb->alloc);
    return Status::Error(kWouldWait, "a partial overwrite reads the chunk's old bytes first");
  }
  while (staging == FileData::Staging::kReadOldBytes) {
    // Partial overwrite of data on the device: its old bytes first (rare
    // for KV workloads, which write whole files), then staged unless the
    // chunk changed meanwhile.
    inode->mu().unlock();
    Status st;
    for (const index::FileExtent& fe : old.extents) {
      st = sched_->ReadSync(io::Lane::kRead, fe.ext.device, fe.ext.byte_off,
                            data + (fe.file_off - cstart), fe.ext.len);
      if (st.ok() && verifier_.enabled()) {
        st = verifier_.Check(inode->ino, fe, data + (fe.file_off - cstart));
      }
      if (!st.ok()) break;
    }
    inode->mu().lock();
    if (!st.ok()) {
      FreeNow(cb->alloc);
      return st.Annotate("reading chunk for a partial overwrite");
    }
    InstalledChunk again;
    const uint64_t size_now = inode->rec.size;
    staging = inode->data.StageRead(ci, cb, old, size, size_now, write_lo, write_hi, &again);
    old = std::move(again);
    size = size_now;
  }
  if (staging == FileData::Staging::kStagedMeanwhile) {  // by another writer, lock dropped
    FreeNow(cb->alloc);
    return Status::OK();
  }
  staged_.Add(inode);
  return Status::OK();
}

// With `may_wait` false, a write that would wait returns kWouldWait, also
// after some of its chunks took their bytes: running it again writes the
// same bytes at the same offsets. Not an append, whose offset is the size
// when it runs: that one is refused before it starts.
Result<size_t> FileSystem::Impl::Write(uint64_t fh, uint64_t off, std::span<const char> data,
                                       KillPriv* kill, bool may_wait) {
  std::optional<Handle> found = handles_.Get(fh);
  if (!found) return Status::Error(EBADF, "write");
  const Handle& h = *found;
  if (!h.writable()) return Status::Error(EBADF, "write on a read-only handle");
  if (!may_wait && (h.flags & O_APPEND)) return Status::Error(kWouldWait, "an append");
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
    if (!i->data.Staged(ci)) {
      Status st = StageChunk(i, ci, lo, hi, may_wait);
      if (!st.ok()) {
        if (pos > off && st.code() != kWouldWait) break;  // report the bytes already accepted
        return st;
      }
    }
    // Grow the reservation if the chunk was staged with less space.
    if (const uint64_t short_by = i->data.ReservationShort(ci, hi); short_by > 0) {
      const void* staged = i->data.StagedId(ci);  // compared after the wait
      std::vector<Extent> more;
      Status st =
          AllocateWithSpace(short_by, volume::PlacementHint{i->ino, ci}, &more, &i->mu(), may_wait);
      // The lock may have been dropped for the wait: the chunk may have
      // been pushed out, truncated or restaged meanwhile. Look again.
      if (!i->data.GrowReservation(ci, staged, more)) FreeNow(more);
      if (!st.ok()) {
        if (pos > off && st.code() != kWouldWait) break;
        return st;
      }
      continue;
    }
    i->data.CopyIn(ci, lo, hi, data.data() + (pos - off));
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
  for (uint64_t ci : inode->data.StagedChunks()) SubmitChunk(inode, ci);
}

// Sends the staged version of chunk `ci` to its reserved extents.
// REQUIRES: the chunk is staged.
void FileSystem::Impl::SubmitChunk(const InodeRef& inode, uint64_t ci) {
  std::vector<Extent> spare;
  std::shared_ptr<ChunkBuf> cb = inode->data.Submit(ci, &spare);
  FreeNow(spare);
  if (!cb) return;  // nothing left to write in the chunk
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
  WrittenOutcome out;
  std::shared_ptr<Change> data_change;
  {
    MutexLock l(inode->mu());
    // A file deleted in memory still installs what it wrote until its
    // delete is built: a change queued before the delete (the rename that
    // named it, its data change) captures its record after this, and a
    // crash before the delete commits leaves the index naming that record.
    out = inode->data.Written(ci, cb, st, inode->delete_built);
    if (out.first_error) {
      spdlog::error("write-behind of inode {} at file offset {} failed: {}", inode->ino,
                    ci * kChunkBytes, st.ToString());
    }
    if (out.installed) ram_->chunks().Erase(inode->token, ci);  // an older version's bytes
    if (out.queue_change) {
      data_change = NewChange();
      data_change->inodes.push_back(inode);
    }
  }
  std::vector<Extent>& free_now = out.free_now;
  std::vector<std::shared_ptr<Change>>& gates = out.gates;
  FreeNow(free_now);
  if (data_change) Enqueue(data_change);
  for (auto& g : gates) committer_->OpenGate(g);
  KVFS_KILL_POINT("WriteBehind::ChunkInstalled");  // its change queued, gates opened
  // `pin` goes here: the inode may leave the table.
}

// Cuts (or grows) the file to `new_size`. Chunks past it are dropped (their
// extents freed once the new size is committed). A cut inside a chunk that
// holds data first writes the chunk's head (its bytes up to the cut, zeros
// after it in its last block) to new space, with the lock let go of, and
// the cut takes effect with that head installed: no capture ever sees the
// new size before the bytes under it are written. (A head only staged
// left a capture nothing true to name: the new size over the old chunk's
// extents, or the size held back to the chunk's start, below data already
// written; after a kill -9 the file came back cut or empty.) On error (no
// space, the old bytes unreadable, the head's write failed) nothing has
// changed. May drop and retake inode->mu().
Status FileSystem::Impl::TruncateData(const InodeRef& inode, uint64_t new_size) {
  const uint64_t ci = new_size / kChunkBytes;
  const uint64_t cstart = ci * kChunkBytes;
  const uint64_t cut = new_size % kChunkBytes;
  const uint64_t bytes = AlignUp(cut, kBlockSize);
  std::optional<FileData::WrittenHead> head;
  device::PoolBuffer buf;
  // Until the head is written from the chunk as it is when the write ends
  // (a writer or a completion may change it while the lock is let go of).
  while (inode->data.TruncateWritesHead(new_size, inode->rec.size)) {
    if (!buf) {
      buf = volume_.buffers().TryAcquire();
      if (!buf) {
        inode->mu().unlock();
        buf = AcquireBuffer();
        inode->mu().lock();
        continue;  // look again
      }
    }
    std::vector<Extent> alloc;
    Status reserved =
        AllocateWithSpace(bytes, volume::PlacementHint{inode->ino, ci}, &alloc, &inode->mu());
    if (!reserved.ok()) {
      return reserved.Annotate("truncate of inode " + std::to_string(inode->ino));
    }
    if (inode->deleted || !inode->data.TruncateWritesHead(new_size, inode->rec.size)) {
      FreeNow(alloc);  // changed while the lock was let go of: look again
      if (inode->deleted) return Status::Error(ENOENT, "truncate of a removed file");
      continue;
    }
    char* data = buf.data();
    const FileData::Head h = inode->data.TakeHead(new_size, data);
    const uint64_t size_then = inode->rec.size;
    inode->mu().unlock();
    Status st;
    for (const index::FileExtent& fe : h.read) {
      st = sched_->ReadSync(io::Lane::kRead, fe.ext.device, fe.ext.byte_off,
                            data + (fe.file_off - cstart), fe.ext.len);
      if (st.ok() && verifier_.enabled()) {
        st = verifier_.Check(inode->ino, fe, data + (fe.file_off - cstart));
      }
      if (!st.ok()) break;
    }
    std::vector<uint32_t> crcs;
    if (st.ok()) {
      std::memset(data + cut, 0, bytes - cut);  // the device gets zeros after the cut
      uint64_t pos = 0;
      for (const Extent& e : alloc) {
        st = sched_->WriteSync(io::Lane::kWrite, e.device, e.byte_off, data + pos, e.len);
        if (!st.ok()) break;
        crcs.push_back(Crc32c(data + pos, e.len));
        pos += e.len;
      }
      // The next commit flushes the devices first: the index never names
      // the head before it is durable.
      committer_->NoteDataWritten();
    }
    KVFS_KILL_POINT("WriteBehind::TruncateHeadWritten");  // written, named by nothing yet
    inode->mu().lock();
    if (!st.ok()) {
      FreeNow(alloc);
      return st.Annotate("writing the head of a truncate of inode " + std::to_string(inode->ino));
    }
    if (!inode->deleted && inode->rec.size == size_then && inode->data.HeadCurrent(h)) {
      head = FileData::WrittenHead{ci, std::move(alloc), std::move(crcs), cut};
      break;
    }
    FreeNow(alloc);  // the chunk changed meanwhile: its head again
    if (inode->deleted) return Status::Error(ENOENT, "truncate of a removed file");
  }
  const uint64_t old_size = inode->rec.size;
  std::vector<Extent> free_now;
  std::vector<uint64_t> dropped;
  inode->data.Truncate(new_size, old_size, &free_now, &dropped, head ? &*head : nullptr);
  FreeNow(free_now);
  for (uint64_t d : dropped) ram_->chunks().Erase(inode->token, d);
  if (head) ram_->chunks().Erase(inode->token, ci);  // an older version's bytes
  inode->rec.size = new_size;
  return Status::OK();
}

}  // namespace kvfs::fs
