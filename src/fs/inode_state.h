// InodeState: the in-memory, live view of one inode, ahead of the index.
//
// The index holds what has been committed; an InodeState holds what the
// calls so far have made of the inode: live metadata, a regular file's data
// (FileData), and what must happen once queued changes commit. fs/ keeps an InodeState
// while the kernel knows the inode (lookup count), it is open, or a queued
// change still refers to it.
//
// A regular file's data -- its chunks (staged, in-flight and installed
// versions), the device commands in flight, its file memory and the opens
// served from it -- is its FileData's (fs/file_data.h), guarded by the
// same lock as the rest: mu(), which the thread-safety analysis checks
// there.
//
// Thread safety: the fields are guarded by mu() unless their comment says
// otherwise; the lock order is written on mu(). Shared by reference
// (InodeRef, fs/inode_table.h), which decides how long it stays live.
#pragma once

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/extent.h"
#include "common/mutex.h"
#include "fs/file_data.h"
#include "fs/victim_order.h"
#include "index/records.h"

namespace kvfs::fs {

struct Change;

struct InodeState {
  InodeState(index::Inode r, uint64_t cache_token)
      : ino(r.ino), token(cache_token), rec(std::move(r)) {}
  bool is_dir() const { return (rec.mode & S_IFMT) == S_IFDIR; }
  bool is_reg() const { return (rec.mode & S_IFMT) == S_IFREG; }

  // The inode's lock, its data's (FileData) too. Lock order: the namespace
  // lock (fs/namespace.h) and a file memory's write-out lock before it; it
  // before the inode table's, the caches' and the committer's locks. Never
  // held while waiting for I/O.
  Mutex& mu() const RETURN_CAPABILITY(data.mu()) { return mu_; }

 private:
  mutable Mutex mu_;

 public:
  // A regular file's data: its chunks, the commands in flight on them, its
  // memory and the opens served from it.
  FileData data{mu_};

  // rec.ino, readable without mu (the table is keyed by it).
  const uint64_t ino;
  // Unique per InodeState (never reused, unlike a reloaded inode number):
  // the owner key of its entries in the ChunkCache.
  const uint64_t token;

  // Live metadata. rec.extents is unused: data's chunks hold the data.
  index::Inode rec;                                     // guarded by mu()
  // What the index has (or is about to have, in queue order): a file's size
  // in the last captured record, a directory's entry count; the link count.
  // Captures use these, not the live values, so a record is never ahead of
  // the entry changes committed with it. guarded by mu()
  uint64_t durable_size = 0;
  uint32_t durable_nlink = 0;
  bool deleted = false;  // no name and no handle: record goes away; guarded by mu()
  bool orphan = false;   // no name, still open; guarded by mu()
  // The change that made it an orphan is queued: its delete may follow
  // (FileSystem::Impl::SettleOrphans). guarded by mu()
  bool orphan_queued = false;
  // An unnamed file (O_TMPFILE without O_EXCL) that no Link() has named
  // yet: the one link kvfs allows (FileSystem::Link). guarded by mu()
  bool linkable = false;
  // The change deleting the record has been built (committer thread, queue
  // order): a change built later must not put the record back. guarded by mu()
  bool delete_built = false;
  // rec.atime_ns moved since the last capture; the AtimeLog holds a pin
  // until it is flushed (fs/atime.h). guarded by mu()
  bool atime_dirty = false;
  // With eviction on, the file's last use, shared with its node in the
  // eviction order (fs/victim_order.h): a use is one atomic store, whatever the
  // atime mode. Set at its first use. The pointer: guarded by mu().
  std::shared_ptr<UseStamp> use_stamp;

  // Counts that keep it in the InodeTable (fs/inode_table.h), changed
  // only by the table. GUARDED_BY(InodeTable::mu_)
  uint64_t lookups = 0;  // the kernel's
  int opens = 0;         // open handles
  int pins = 0;          // InodePins
};

}  // namespace kvfs::fs
