#include "fsck/repair.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <ctime>
#include <set>

#include "common/format.h"

namespace kvfs::fsck {

namespace {

using namespace inode_flags;  // NOLINT

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// True if inode `i`'s record must be written: created, changed by a check,
// or its counts differ from what is stored.
bool NeedsWrite(const Model& m, const std::vector<Model::Final>& fin, uint32_t i) {
  const InodeRec& r = m.inodes[i];
  if (r.flags & kReclaim) return false;
  if (r.flags & (kCreated | kRewrite)) return true;
  if (fin[i].nlink != r.nlink) return true;
  if (r.is_dir() && (fin[i].size != r.size || fin[i].parent != r.parent)) return true;
  return false;
}

// The record to write for inode `i`.
Result<index::Inode> BuildRecord(const Model& m, const std::vector<Model::Final>& fin, uint32_t i) {
  const InodeRec& r = m.inodes[i];
  index::Inode rec;
  if (r.flags & kCreated) {
    rec.ino = r.ino;
    rec.atime_ns = rec.mtime_ns = rec.ctime_ns = NowNs();
    rec.generation = 1;
  } else {
    KVFS_ASSIGN_OR_RETURN(rec, m.index->GetInode(r.ino));
  }
  index::RepairXattrs(rec.xattrs);  // drops only what CheckXattrs reports
  rec.mode = r.mode;
  rec.nlink = fin[i].nlink;
  rec.size = r.is_dir() ? fin[i].size : r.size;
  if (r.is_dir()) rec.parent = fin[i].parent;
  if (m.HasNewExtents(i) || (r.flags & kCreated)) {
    rec.extents.clear();
    for (const ExtentRec& fe : m.FinalExtents(i)) {
      rec.extents.push_back(index::FileExtent{fe.file_off, fe.ext, fe.crc32c});
    }
  }
  return rec;
}

}  // namespace

size_t PlannedWrites(const Model& m) {
  size_t n = m.bad_keys.size() + m.orphan_key_deletes.size() + m.clones.size();
  for (const EntryRec& e : m.entries) {
    const bool del = e.flags & entry_flags::kDeleted, add = e.flags & entry_flags::kAdded;
    n += del != add;
  }
  const std::vector<Model::Final> fin = m.ComputeFinal();
  for (uint32_t i = 0; i < m.inodes.size(); ++i) {
    const InodeRec& r = m.inodes[i];
    if ((r.flags & kReclaim) && (r.flags & kOrphanKey)) ++n;
    n += NeedsWrite(m, fin, i);
  }
  return n;
}

Status ApplyRepairs(Model& m, OpenedVolume& v) {
  // 1. Copies of shared blocks, durable before the index names them.
  std::set<uint32_t> written;
  for (const CloneOp& op : m.clones) {
    KVFS_ASSIGN_OR_RETURN(AlignedBuffer data, ReadExtent(v, op.src));
    uint64_t pos = 0;
    for (const Extent& d : op.dst) {
      KVFS_RETURN_IF_ERROR(v.devices[d.device]->WriteAt(d.byte_off, data.get() + pos, d.len));
      written.insert(d.device);
      pos += d.len;
    }
  }
  for (uint32_t d : written) KVFS_RETURN_IF_ERROR(v.devices[d]->Sync());

  index::Index& idx = *v.index;
  // 2. Records that do not decode, by key (the schema's batch cannot name them).
  if (!m.bad_keys.empty()) {
    rocksdb::WriteBatch raw;
    for (const BadKey& b : m.bad_keys) {
      rocksdb::Status s = raw.Delete(idx.handle(b.cf), b.key);
      if (!s.ok()) return Status::Error(EIO, "batch: " + s.ToString());
    }
    rocksdb::WriteOptions wo;
    wo.sync = true;
    rocksdb::Status s = idx.db()->Write(wo, &raw);
    if (!s.ok()) {
      return Status::Error(EIO, "index " + idx.dir() + ": deleting bad records: " + s.ToString());
    }
  }

  // 3. Everything else in one synced batch.
  index::WriteBatch batch = idx.NewBatch();
  for (const EntryRec& e : m.entries) {
    const bool del = e.flags & entry_flags::kDeleted, add = e.flags & entry_flags::kAdded;
    if (del && !add) batch.DeleteEntry(e.parent, m.Name(e));
    if (add && !del) batch.PutEntry(e.parent, m.Name(e), e.child);
  }
  for (uint64_t ino : m.orphan_key_deletes) batch.DeleteOrphan(ino);
  const std::vector<Model::Final> fin = m.ComputeFinal();
  for (uint32_t i = 0; i < m.inodes.size(); ++i) {
    const InodeRec& r = m.inodes[i];
    if (r.flags & kReclaim) {
      // An orphan: its extents become free because the record goes away.
      batch.DeleteInode(r.ino);
      batch.DeleteOrphan(r.ino);
      continue;
    }
    if (!NeedsWrite(m, fin, i)) continue;
    KVFS_ASSIGN_OR_RETURN(index::Inode rec, BuildRecord(m, fin, i));
    batch.PutInode(rec);
  }
  if (batch.empty()) return Status::OK();
  return idx.Commit(batch, /*sync=*/true);
}

}  // namespace kvfs::fsck
