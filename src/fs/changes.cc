// Building index changes: queuing them in order, capturing live records
// into the committer's batches, and what happens once a batch is committed
// (replaced extents freed after the reads that may still use them).
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>

#include "common/format.h"
#include "common/kill_point.h"
#include "fs/file_system_impl.h"

namespace kvfs::fs {

Status FileSystem::Impl::FlushDevices() {
  for (uint32_t d = 0; d < sched_->device_count(); ++d) {
    KVFS_RETURN_IF_ERROR(sched_->FlushSync(io::Lane::kMeta, d));
  }
  return Status::OK();
}

Status FileSystem::Impl::Writable() const {
  if (options_.read_only) return Status::Error(EROFS, "mounted read-only");
  Status failure = volume_.index().failure();
  if (failure.ok()) failure = committer_->failure();
  if (failure.ok()) return Status::OK();
  return Status::Error(EROFS, "a commit failed (" + failure.ToString() +
                                  "); no more changes until kvfs is remounted");
}

void FileSystem::Impl::Enqueue(const std::shared_ptr<Change>& c) {
  c->pins.reserve(c->inodes.size() + c->deletes.size());
  for (auto& i : c->inodes) c->pins.push_back(table_.Pin(i));
  for (auto& i : c->deletes) c->pins.push_back(table_.Pin(i));
  committer_->Enqueue(c);
  // Queued (a rename, unlink, truncate or new data is visible to callers),
  // not committed.
  KVFS_KILL_POINT("FileSystem::Enqueued");
  if (!c->orphan_puts.empty()) SettleOrphans(*c);
}

void FileSystem::Impl::EnqueueRecord(const InodeRef& inode) {
  auto c = NewChange();
  c->inodes.push_back(inode);
  Enqueue(c);
}

void FileSystem::Impl::SettleOrphans(Change& c) {
  for (const InodeRef& i : c.inodes) {
    if (std::find(c.orphan_puts.begin(), c.orphan_puts.end(), i->ino) == c.orphan_puts.end()) {
      continue;
    }
    MutexLock l(i->mu());
    i->orphan_queued = true;
    // Its last handle closed between NameChange's drop of its name and now: Release left the
    // delete to this, so that it queues after the change above.
    if (i->orphan && !i->deleted && table_.opens(*i) == 0) {
      std::shared_ptr<Change> d = OrphanDelete(i);
      l.Unlock();
      Enqueue(d);
    }
  }
}

std::shared_ptr<Change> FileSystem::Impl::OrphanDelete(const InodeRef& inode) {
  inode->orphan = false;
  inode->deleted = true;
  auto c = NewChange();
  c->deletes.push_back(inode);
  c->orphan_deletes.push_back(inode->ino);
  return c;
}

void FileSystem::Impl::QueueNameChange(const NameChange& change) {
  ns_.Record(*change.change());
  Enqueue(change.change());
}

std::shared_ptr<Change> FileSystem::Impl::QueueDataChange(const InodeRef& inode, bool sync) {
  auto c = NewChange();
  c->inodes.push_back(inode);
  c->sync = sync;
  inode->data.Gate(c);  // captured once the writes in flight now completed
  return c;  // the caller adds waiters, then Enqueue()s
}

std::shared_ptr<Change> FileSystem::Impl::WriteOut(const InodeRef& inode) {
  SubmitAllStaged(inode);
  if (inode->data.writes_in_flight() > 0 || inode->data.change_queued()) {
    return QueueDataChange(inode, false);
  }
  return nullptr;
}

// Captures the live record of `inode` for the index. The size is held back
// to the start of the first chunk past the last captured size whose new data
// is not written yet, so a crash never shows a grown file with a hole where
// unwritten data should be; and held up to the end of an extent a truncate
// cut whose chunk's new head is not written yet, so a crash never shows the
// kept head as zeros.
static index::Inode CaptureRecord(InodeState& x, std::vector<Extent>* frees) REQUIRES(x.mu()) {
  index::Inode r = x.rec;
  r.extents.clear();
  r.nlink = x.durable_nlink;
  if (x.is_dir()) r.size = x.durable_size;
  if (x.is_reg()) {
    uint64_t size = x.rec.size;
    const uint64_t durable = x.durable_size;
    for (const auto& [ci, cs] : x.chunks) {
      if ((cs.staged || cs.inflight || cs.failed) && (ci + 1) * kChunkBytes > durable) {
        size = std::min(size, std::max(durable, ci * kChunkBytes));
        break;
      }
    }
    uint64_t limit = AlignUp(size, kBlockSize);
    // A truncate that cut inside an extent staged the chunk's head, to be
    // written as a new extent; until that is installed the old extent is
    // the only copy of the head's bytes. The record keeps it, and its size
    // reaches the extent's end or the old size (a prefix of the old file, as
    // growth is held back above), or a crash would leave the new size over zeros.
    for (const auto& [ci, cs] : x.chunks) {
      if (!cs.staged && !cs.inflight) continue;
      for (const index::FileExtent& fe : cs.extents) {
        if (fe.file_off < limit && fe.file_off + fe.ext.len > limit) {
          // Not past the old size: the extent's last block may hold more.
          size = std::min(fe.file_off + fe.ext.len, std::max(size, durable));
          limit = std::max(limit, fe.file_off + fe.ext.len);
        }
      }
    }
    for (const auto& [ci, cs] : x.chunks) {
      for (const index::FileExtent& fe : cs.extents) {
        if (fe.file_off + fe.ext.len <= limit) r.extents.push_back(fe);
      }
    }
    r.size = size;
    x.durable_size = size;
  }
  frees->insert(frees->end(), x.free_pending.begin(), x.free_pending.end());
  x.free_pending.clear();
  x.data.Captured();
  x.atime_dirty = false;  // the record carries it
  return r;
}

void FileSystem::Impl::BuildChange(Change& c, index::WriteBatch& batch) {
  for (const Change::Delta& d : c.deltas) {
    MutexLock l(d.inode->mu());
    d.inode->durable_size = static_cast<uint64_t>(static_cast<int64_t>(d.inode->durable_size) + d.size);
    d.inode->durable_nlink = static_cast<uint32_t>(static_cast<int32_t>(d.inode->durable_nlink) + d.nlink);
  }
  for (const EntryOp& op : c.entry_ops) {
    if (op.child) {
      batch.PutEntry(op.parent, op.name, op.child);
    } else {
      batch.DeleteEntry(op.parent, op.name);
    }
  }
  for (auto& inode : c.inodes) {
    std::vector<Extent> frees;
    index::Inode rec;
    {
      MutexLock l(inode->mu());
      // A data change enqueued by a write completion can land behind the
      // unlink that deleted the file; putting the record then would
      // resurrect it, nameless (found by fsck.kvfs as an unreachable inode).
      if (inode->delete_built) continue;
      rec = CaptureRecord(*inode, &frees);
    }
    batch.PutInode(rec);
    if (!frees.empty()) c.frees.emplace_back(inode, std::move(frees));
  }
  for (auto& inode : c.deletes) {
    std::vector<Extent> frees;
    {
      MutexLock l(inode->mu());
      inode->delete_built = true;
      for (auto& [ci, cs] : inode->chunks) {
        for (const auto& fe : cs.extents) frees.push_back(fe.ext);
        cs.extents.clear();
      }
      frees.insert(frees.end(), inode->free_pending.begin(), inode->free_pending.end());
      inode->free_pending.clear();
    }
    batch.DeleteInode(inode->rec.ino);
    ram_->chunks().EraseOwner(inode->token);
    if (!frees.empty()) c.frees.emplace_back(inode, std::move(frees));
  }
  for (uint64_t ino : c.orphan_puts) batch.PutOrphan(ino);
  for (uint64_t ino : c.orphan_deletes) batch.DeleteOrphan(ino);
}

void FileSystem::Impl::ChangeCommitted(Change& c, Status st) {
  if (st.ok()) {
    for (auto& [inode, extents] : c.frees) FreeAfterReads(inode, std::move(extents));
  } else if (!c.frees.empty()) {
    // The index may still name them: leaking space is safe, freeing is not.
    spdlog::error("commit failed; {} extent list(s) stay allocated until remount",
                  c.frees.size());
  }
  c.frees.clear();
  ns_.Committed(c, st.ok());
  c.pins.clear();  // the inodes may leave the table now
  c.inodes.clear();
  c.deletes.clear();
  c.deltas.clear();
}

void FileSystem::Impl::FreeNow(const std::vector<Extent>& extents) {
  if (extents.empty()) return;
  Status st = volume_.Free(extents);
  if (!st.ok()) spdlog::error("freeing space: {} (this is a kvfs bug)", st.ToString());
}

void FileSystem::Impl::FreeAfterReads(const InodeRef& inode, std::vector<Extent> extents) {
  {
    MutexLock l(inode->mu());
    if (inode->data.KeepForReads(extents)) return;  // freed by the last read's end
  }
  FreeNow(extents);
}

void FileSystem::Impl::FinishDeviceRead(InodePin pin) {
  std::vector<Extent> frees;
  {
    MutexLock l(pin->mu());
    frees = pin->data.EndRead();
  }
  FreeNow(frees);
  // `pin` goes here: the inode may leave the table.
}

}  // namespace kvfs::fs
