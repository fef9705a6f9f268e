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

// Captures the live record of `inode` for the index: the record, and for
// a regular file its data's half (FileData::Capture: the size it may have
// and the extents it names; the replaced extents to free once committed).
static index::Inode CaptureRecord(InodeState& x, std::vector<Extent>* frees) REQUIRES(x.mu()) {
  index::Inode r = x.rec;
  r.extents.clear();
  r.nlink = x.durable_nlink;
  if (x.is_dir()) r.size = x.durable_size;
  if (x.is_reg()) {
    r.size = x.data.Capture(x.rec.size, x.durable_size, &r.extents, frees);
    x.durable_size = r.size;
  }
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
      inode->data.TakeAll(&frees);
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
