// Index: kvfs's metadata in RocksDB (schema in records.h).
//
// Many point lookups that miss (connectors stat names that do not exist) are
// served by whole-key bloom filters on the entries family (in SST files and
// the memtable); the block cache is bounded (Options).
//
// Durability: Commit(batch, sync=true) returns after the WAL is fsynced, so a
// crash after it keeps the batch; with sync=false a crash may lose the batch
// (and every later one) but never part of it: a batch is all-or-nothing. A
// sync=false commit is in the kernel's page cache when Commit returns, so it
// survives a crash of the process, not of the machine.
//
// A failed write (Commit or SyncWal: the index's disk is full, an I/O error)
// is sticky: the index takes no more writes and returns that first error
// from every later Commit and SyncWal. RocksDB itself stops writing after
// such an error, and its WAL writer must not be synced after one (Debian's
// build asserts on it). Reopening recovers the last committed batch.
//
// Thread safety: every Index method is safe from any thread. A WriteBatch
// belongs to one thread at a time.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/sticky_error.h"
#include "index/records.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace kvfs::index {

class Index;

// Changes applied together by Index::Commit. Build with Index::NewBatch();
// the Index must outlive the batch. A moved-from batch may only be assigned
// to or destroyed. Later operations on the same key win.
class WriteBatch {
 public:
  ~WriteBatch();
  WriteBatch(WriteBatch&&) noexcept;
  WriteBatch& operator=(WriteBatch&&) noexcept;

  void PutInode(const Inode& inode);
  void DeleteInode(uint64_t ino);
  // A name that is empty or longer than kMaxNameLen makes Commit fail with
  // EINVAL (fs/ checks names first; this only keeps bad keys out).
  void PutEntry(uint64_t parent, std::string_view name, uint64_t child);
  void DeleteEntry(uint64_t parent, std::string_view name);
  void PutOrphan(uint64_t ino);
  void DeleteOrphan(uint64_t ino);
  bool empty() const;
  size_t count() const;

 private:
  friend class Index;
  explicit WriteBatch(Index* index);
  void CheckName(std::string_view name);
  Index* index_;
  std::unique_ptr<rocksdb::WriteBatch> batch_;
  Status error_;  // first invalid argument; Commit returns it
};

class Index {
 public:
  struct Options {
    size_t block_cache_bytes = 64 << 20;
    // fsck -n, possibly on a mounted volume. Opened as a RocksDB secondary
    // instance (DB::OpenAsSecondary): a plain OpenForReadOnly is undefined
    // behaviour while another process has the index open read-write. The
    // view is the state at Open (including commits only in the WAL); writes
    // fail with EROFS. Nothing is written into `dir`.
    bool read_only = false;
  };

  // Creates a new index in `dir` (created if missing, its parent must exist;
  // EEXIST if it already holds an index) with `volume` and a root directory
  // inode (kRootIno, mode S_IFDIR|0755, nlink 2, owned by root_uid/root_gid),
  // durably (synced). Returns it open read-write.
  static Result<std::unique_ptr<Index>> Create(const std::string& dir, const VolumeRecord& volume,
                                               uint32_t root_uid, uint32_t root_gid);
  // Opens an existing index. ENOENT if `dir` holds no index, EINVAL if it is
  // not a kvfs index (other column families, no volume record, or a format
  // version newer than this build), EBUSY if another Index or process has it
  // open read-write, EIO/EUCLEAN on I/O errors and corruption.
  static Result<std::unique_ptr<Index>> Open(const std::string& dir, const Options& options);
  ~Index();  // Flushes nothing extra: committed batches are already in the WAL.

  const VolumeRecord& volume() const { return volume_; }
  // Replaces the volume record, durably (synced): a device added to the
  // volume (volume/add_device.h). The UUIDs must stay those of this index.
  Status SetVolume(const VolumeRecord& volume);
  const std::string& dir() const { return dir_; }

  Result<Inode> GetInode(uint64_t ino) const;  // ENOENT if absent
  // The child inode of `name` in `parent`; ENOENT if absent.
  Result<uint64_t> LookupEntry(uint64_t parent, std::string_view name) const;
  // Calls fn(name, child) for entries of `parent` with name > `after`, in
  // byte order of names, until fn returns false. `name` is valid only during
  // the call. Resume a listing by passing the last name seen as `after`.
  Status ListEntries(uint64_t parent, std::string_view after,
                     const std::function<bool(std::string_view, uint64_t)>& fn) const;
  // True if `parent` has at least one entry.
  Result<bool> HasEntries(uint64_t parent) const;

  // Full scans for mount (free-space rebuild, orphans) and fsck, in key
  // order. Stop when fn returns false. A record that fails to decode is
  // reported as EUCLEAN naming the key, unless `on_bad` is given: then it is
  // called with that status (and the scan stops if it returns false).
  // Scans do not fill the block cache.
  using BadRecordFn = std::function<bool(const Status&)>;
  Status ForEachInode(const std::function<bool(const Inode&)>& fn,
                      const BadRecordFn& on_bad = nullptr) const;
  Status ForEachEntry(
      const std::function<bool(uint64_t parent, std::string_view name, uint64_t child)>& fn,
      const BadRecordFn& on_bad = nullptr) const;
  Status ForEachOrphan(const std::function<bool(uint64_t ino)>& fn,
                       const BadRecordFn& on_bad = nullptr) const;

  // Reads entries, then inodes, into the block cache until about
  // `max_bytes` of records have been read: lookups after a mount (or after
  // the kernel's page cache was dropped) are then served from memory.
  Status WarmCache(uint64_t max_bytes) const;

  // A fresh inode number: never returned before by this Index, and never one
  // that a committed batch can have used, across reopen and crash (Commit
  // persists the counter in the same batch). A number allocated but never
  // committed may be handed out again after a reopen.
  uint64_t AllocateIno();

  WriteBatch NewBatch();
  // Applies `batch` atomically (plus the inode counter). sync: see above.
  // On success the batch is emptied for reuse; on failure it is unchanged
  // and nothing of it was applied. EROFS on a read-only index; an empty
  // batch writes nothing (with sync, it still syncs the WAL).
  Status Commit(WriteBatch& batch, bool sync);
  // Makes every earlier commit durable (WAL fsync). OK on a read-only index.
  Status SyncWal();
  // OK, or the first failed write (see the top): no write will succeed.
  Status failure() const;

  // Implementation details follow. For tools and tests that must reach
  // below the schema (fsck deleting a malformed key, tests planting one).
  rocksdb::DB* db() const { return db_.get(); }
  // The handle of family `name` ("default", kInodesCf, ...); nullptr if
  // unknown. Owned by the Index.
  rocksdb::ColumnFamilyHandle* handle(std::string_view name) const;

 private:
  friend class WriteBatch;
  enum Cf { kDefault = 0, kInodes = 1, kEntries = 2, kOrphans = 3, kNumCfs = 4 };
  Index() = default;
  static Result<std::unique_ptr<Index>> OpenDb(const std::string& dir, const Options& options,
                                               bool create);
  Status LoadNextIno();
  rocksdb::ColumnFamilyHandle* cf(Cf c) const { return cfs_[c]; }

  // All set by Create/Open, then immutable.
  std::string dir_;
  bool read_only_ = false;
  VolumeRecord volume_;
  // ~Index destroys the handles in cfs_ before closing db_, which owns them.
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs_;  // indexed by Cf
  // Next inode number to hand out; persisted by every Commit (with max
  // semantics, so commits racing each other never move it backwards).
  std::atomic<uint64_t> next_ino_{0};
  StickyError failure_;  // the first failed write
};

}  // namespace kvfs::index
