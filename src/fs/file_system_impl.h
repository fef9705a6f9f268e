// FileSystem::Impl: the owner of the parts of fs/ and the methods each
// file implements over them. Internal to fs/.
//
// Parts that own their state and lock (each header states its contract):
//   namespace.h        names ahead of the index, the namespace lock
//   name_change.h      the one builder of name changes (link, unlink,
//                      replace, move); name_observer.h hears them
//   file_data.h        one regular file's data state (chunks, commands in
//                      flight, served opens), under its inode's lock
//   ram_cache.h        chunk cache and file memory with their memory
//   staged_inodes.h, retained_pins.h  staging pressure, the pins of
//                      loads without a lookup (prefetches, guesses)
//   committer.h, inode_table.h, handle_table.h, prefetcher.h, atime.h,
//   recency.h, eviction.h, eviction_part.h (the order, the pass thread,
//   the listener)
//
// Where the methods are:
//   file_system.cc     the facade: the EROFS gate and metrics for every
//                      call (fs/calls.h), construction and shutdown,
//                      flushes, the stats snapshot
//   inode_table.*      live inodes, lookup/open counts, InodePin
//   handle_table.h     open file and directory handles
//   path.h             name and path syntax (one errno table)
//   namespace_ops.cc   lookup, attributes, mkdir/rmdir, unlink, rename
//                      (checks; the change is a NameChange), listings
//   changes.cc         building index changes, the committer's callbacks,
//                      freeing replaced extents after readers
//   file_ops.cc        create/open/flush/release/fsync/fallocate, read(2)
//   tmpfile_ops.cc     O_TMPFILE files and the one link that names them
//   write_behind.cc    staging, chunk submission, chunk written, truncate
//                      (the chunk states' side is FileData's)
//   read_path.cc       planning and running reads (read(2) and ReadFile)
//   cache_loads.cc     loading files into the RAM cache (prefetch, hints)
//   prefetcher.*       the prefetch thread and its queues; readahead.h
//   whole_file_ops.cc  the batch ioctl's path calls
//   whole_file_write.cc  WriteFile
//   xattr_ops.cc       extended attributes (rules: xattr.h)
//   atime.cc           access times and their flushes (atime.h)
//
// Thread safety: as FileSystem (any thread). Each member names the lock
// that guards it; the lock order is written on ns_.
#pragma once

#include <fcntl.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/format.h"
#include "common/large_buffer.h"
#include "fs/atime.h"
#include "fs/cache_registrar.h"
#include "fs/chunk_cache.h"
#include "fs/committer.h"
#include "fs/entry_cache.h"
#include "fs/file_memory.h"
#include "fs/eviction.h"
#include "fs/eviction_part.h"
#include "fs/file_system.h"
#include "fs/handle_table.h"
#include "fs/inode_state.h"
#include "fs/inode_table.h"
#include "fs/name_change.h"
#include "fs/namespace.h"
#include "fs/path.h"
#include "fs/prefetcher.h"
#include "fs/read_verify.h"
#include "fs/ram_cache.h"
#include "fs/retained_pins.h"
#include "fs/staged_inodes.h"
#include "fs/stats.h"
#include "fs/victim_order.h"
#include "io/scheduler.h"

namespace kvfs::fs {

class FileSystem::Impl {
 public:
  Impl(volume::Volume& volume, const FileSystemOptions& options, std::unique_ptr<RamCache> ram);
  ~Impl();

  // --- file_system.cc
  Status Shutdown();
  Status FlushAll();
  FsStats StatFs();
  Result<uint64_t> ResolvePath(std::string_view path);
  Status DropCache();
  StatsSnapshot Stats();
  static Attr ToAttr(const index::Inode& rec);
  // The scheduler's options: the engine's defaults with options.lane_commands.
  static io::SchedulerOptions LaneOptions(const volume::Volume& volume,
                                          const FileSystemOptions& options);
  int64_t NowNs() const;  // options_.now_ns, or the real-time clock
  // OK, or EROFS once the index failed a write (Index::failure) or a
  // device flush before a commit failed (Committer::failure): every change
  // after that would be lost, so none is accepted. The facade asks it for
  // every call that changes something (fs/calls.h).
  Status Writable() const;

  // --- namespace_ops.cc
  Result<Attr> Lookup(uint64_t parent, std::string_view name, const Caller* check,
                      bool* everyone_searches);
  // The attributes of a looked-up (or getattr'd) inode; queues a prefetch
  // of a regular file that has a name when prefetch=lookup, with
  // `only_idle` only if it is not open and has no uncommitted writes.
  Attr AttrAndPrefetch(const InodeRef& inode, bool only_idle);
  void Forget(uint64_t ino, uint64_t nlookup) { table_.Forget(ino, nlookup); }
  Result<Attr> GetAttr(uint64_t ino);
  Status Access(uint64_t ino, int want, const Caller* check, bool* everyone_searches);
  Result<Attr> SetAttr(uint64_t ino, const SetAttrRequest& req, const Caller* check,
                       bool* narrowed);
  // SetAttr, with any write-out of the file's memory it must follow done.
  Result<Attr> SetAttrLocked(const InodeRef& i, const SetAttrRequest& req, const Caller* check,
                             bool* narrowed);
  Result<Attr> MkDir(uint64_t parent, std::string_view name, uint32_t mode, const Caller& caller,
                     const Caller* check, bool* everyone_searches);
  Status RmDir(uint64_t parent, std::string_view name, const Caller* check);
  Status Unlink(uint64_t parent, std::string_view name, const Caller* check);
  // Unlink (and the batch's DeleteFile) under the namespace lock.
  Status UnlinkLocked(uint64_t parent, std::string_view name, const Caller* check)
      REQUIRES(ns_.mu());
  Status Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                std::string_view new_name, unsigned flags, const Caller* check,
                bool* drop_names);
  Result<uint64_t> OpenDir(uint64_t ino, int flags, const Caller* check);
  // Lists directory dh->ino into dh->items ("." and ".." first, then the
  // names in order, uncommitted changes included; nothing for a removed
  // directory). REQUIRES: dh->mu held.
  Status ListDir(DirHandle* dh);
  Status ReadDir(uint64_t dh, uint64_t off,
                 const std::function<bool(std::string_view, uint64_t, uint32_t, uint64_t)>& fn);
  void ReleaseDir(uint64_t dh) { handles_.ReleaseDir(dh); }

  // --- read_path.cc: the data read path of Read() and ReadFile().
  struct ReadPlan {
    struct Piece {        // one device range
      uint32_t device = 0;
      uint64_t dev_off = 0;   // aligned
      uint64_t dev_len = 0;   // aligned
      char* direct = nullptr;  // where it lands in the destination, or null: bounced
      uint64_t out_off = 0;   // where the wanted bytes go in the destination
      uint64_t skip = 0;      // wanted bytes start this far into the device range
      uint64_t len = 0;       // wanted bytes
      std::optional<index::FileExtent> verify;  // verify=on: a whole extent, checked
    };
    struct Wait {         // bytes of a cached chunk, ready or loading
      std::shared_ptr<CachedChunk> chunk;
      uint64_t chunk_off = 0;
      uint64_t out_off = 0;
      uint64_t len = 0;
    };
    std::vector<Piece> pieces;
    std::vector<Wait> waits;
    std::vector<device::IoRequest> loads;  // verify=on: chunk loads; always submit them
    Status fail;  // EIO for data lost by a failed write; nothing to execute then
    bool has_work() const { return !pieces.empty() || !waits.empty(); }
  };
  // Plans reading file bytes [off, off + len) into dst (`room` bytes of it
  // may be written: the rest of a last block read whole). Copies staged data
  // and zeros holes now. With work planned, counts a device read in flight
  // (reads_inflight), which ExecuteRead ends with FinishDeviceRead.
  // REQUIRES: off + len <= the file's size.
  void PlanRead(const InodeRef& i, uint64_t off, uint64_t len, char* dst, uint64_t room,
                ReadPlan* plan) REQUIRES(i->mu());
  // Runs a plan with work; `pin` keeps `i` until FinishDeviceRead (the
  // caller submits plan.loads itself when it does not call this).
  // done(status) runs once, on an engine thread if anything went to the
  // device, after every byte is in dst.
  void ExecuteRead(InodePin pin, ReadPlan plan, char* dst, CancelFlag cancel,
                   std::function<void(Status)> done);

  // --- file_ops.cc
  Result<Created> Create(uint64_t parent, std::string_view name, uint32_t mode, int flags,
                         const Caller& caller, const Caller* check, bool* everyone_searches);
  Result<uint64_t> Open(uint64_t ino, int flags, KillPriv* kill, const Caller* check);
  void OpenServed(uint64_t ino, int flags, KillPriv* kill, const Caller* check,
                  std::function<bool(FileMemory&)> can_serve,
                  std::function<void(Result<Opened>)> done);
  // --- tmpfile_ops.cc (contracts in file_system.h)
  Result<Created> CreateUnnamed(uint64_t parent, uint32_t mode, int flags, const Caller& caller,
                                const Caller* check, bool* everyone_searches);
  Result<Attr> Link(uint64_t ino, uint64_t new_parent, std::string_view new_name,
                    const Caller* check, bool* everyone_searches);
  void Read(uint64_t fh, uint64_t off, size_t size, ReadDone done, CancelFlag cancel);
  Status Flush(uint64_t fh, bool may_wait);
  // Never takes ns_.mu() (it runs on the request receiver): an unlinked
  // file's delete is queued by whichever of the last close and the
  // unlink's queuing comes second (SettleOrphans).
  bool Release(uint64_t fh, bool may_wait);
  bool Fsync(uint64_t fh, std::function<void(Status)> done, bool may_wait);
  Status Fallocate(uint64_t fh, int mode, uint64_t off, uint64_t len, KillPriv* kill);

  // --- write_behind.cc
  Result<size_t> Write(uint64_t fh, uint64_t off, std::span<const char> data, KillPriv* kill,
                       bool may_wait);

  // --- whole_file_ops.cc: the batch ioctl's calls (contracts in file_system.h)
  Result<Attr> LookupPath(uint64_t dir, std::string_view path, const Caller& caller);
  void ExistsPaths(uint64_t dir, std::span<const std::string_view> paths, const Caller& caller,
                   std::span<int> codes);
  // `attempts`: walks of `path` while each finds a file replaced meanwhile.
  void ReadFile(uint64_t dir, std::string_view path, uint64_t off, std::span<char> dest,
                const Caller& caller, std::function<void(Result<size_t>)> done,
                int attempts = 3);
  Status DeleteFile(uint64_t dir, std::string_view path, const Caller& caller);
  Result<uint64_t> PrefetchFile(uint64_t dir, std::string_view path, const Caller& caller);
  // --- whole_file_write.cc
  void WriteFile(uint64_t dir, std::string_view path, std::span<const char> data,
                 const Caller& caller, std::function<void(Status)> done);

  // --- cache_loads.cc
  Status PrefetchIno(uint64_t ino, const Caller* check);

  // --- xattr_ops.cc
  Status SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags,
                  const Caller& caller, const Caller* check);
  Result<std::string> GetXattr(uint64_t ino, std::string_view name, const Caller& caller,
                               const Caller* check);
  Result<std::string> ListXattr(uint64_t ino, const Caller& caller);
  Status RemoveXattr(uint64_t ino, std::string_view name, const Caller& caller,
                     const Caller* check);

  // --- atime.cc
  // A use of `i` (open for reading, read): records it for the eviction
  // policy (last_use_ns) and moves atime as options_.atime says, logging
  // the inode for the next atime flush. Cheap: no lock beyond i->mu(), and
  // the log's only when the atime moves. REQUIRES: i->mu() held.
  void NoteUse(const InodeRef& i, int64_t now_ns);
  // The AtimeLog's flush: queues record changes for the pinned inodes whose
  // atime is still dirty, kAtimeBatch per change.
  void FlushAtimes(std::vector<InodePin> pins);

  // --- eviction_ops.cc (fs/eviction.h)
  // With -o evict=lru: rebuilds the victim order from the index and
  // starts the Evictor. Called once, at construction.
  void StartEviction();
  // A use of `i` for the eviction order: lookup, getattr and the batch's
  // STAT (NoteUse covers open, read and READ). One atomic store, after the
  // file's first use; nothing without eviction. REQUIRES: i.mu() held.
  void UsedForEviction(InodeState& i, int64_t now_ns) {
    VictimOrder* victims = eviction_.order();
    if (!victims || !i.is_reg()) return;
    if (!i.use_stamp) i.use_stamp = victims->StampOf(i.ino);
    i.use_stamp->Use(now_ns);
  }
  // The Evictor's batch: unlinks up to `max_files` files the victim order
  // offers and the rules (fs/eviction_rules.h) let go, until `bytes` are
  // evicted. Takes ns_.mu().
  Evictor::Batch EvictBatch(size_t max_files, uint64_t bytes, std::vector<Evictor::Gone>* gone);
  void SetEvictionListener(std::function<void(uint64_t, std::string_view, uint64_t)> fn);

  // --- whole_file_write.cc: one WriteFile call in flight.
  struct WriteState;
  // Frees extents in the allocator now; logs a double free.
  void FreeNow(const std::vector<Extent>& extents);

 private:
  friend class FileSystem;
  // Every write of `ws` completed: the new inode takes the name (checked
  // again), or the space goes back. Runs ws->done.
  void FinishWriteFile(const std::shared_ptr<WriteState>& ws);

  // --- namespace_ops.cc
  // A new regular file (returned open once, as create(2) does) or
  // directory (`mode` has the type) named `name` in `parent`, with one
  // kernel lookup; its change is queued. ENOTDIR, then `check`'s
  // MayChangeNamesIn, then EEXIST, ENOENT for a removed parent.
  Result<InodeRef> AddChild(uint64_t parent, std::string_view name, uint32_t mode,
                            const Caller& caller, const Caller* check, bool* everyone_searches)
      REQUIRES(ns_.mu());
  // A record for a new inode (number allocated; the caller's uid and gid;
  // link count 2 for a directory, else 1; times `now`).
  index::Inode NewRecord(uint32_t mode, const Caller& caller, int64_t now);
  // A new inode's record in directory `parent` with S_ISGID takes the
  // directory's group, and a directory's record S_ISGID. Takes parent.mu().
  void InheritSetgid(InodeState& parent, index::Inode* rec);
  // whole_file_ops.cc: resolves `path` under `dir` for `caller` (search
  // permission on every directory walked; syntax by SplitPath, fs/path.h).
  // With `want_parent`, stops before the last component: the directory
  // that holds it, and *leaf its name; otherwise the inode `path` names.
  Result<InodePin> WalkPath(uint64_t dir, std::string_view path, const Caller& caller,
                            bool want_parent, std::string_view* leaf) REQUIRES_SHARED(ns_.mu());
  // What WriteFile over `leaf` in `p` checks, as rename(2) over it would:
  // ENOENT for a removed directory, write and search permission on it, the
  // sticky rule, and no directory in the way. Yields the file being
  // replaced, or null.
  Result<InodeRef> CheckReplace(const InodeRef& p, std::string_view leaf, const Caller& who)
      REQUIRES_SHARED(ns_.mu());

  // --- changes.cc. REQUIRES for Enqueue: ns_.mu() held when entry ops are
  // involved, so the overlay and the queue agree on order.
  std::shared_ptr<Change> NewChange() { return std::make_shared<Change>(); }
  // Queues `c`, pinning its inodes until it is committed. Then settles the
  // files it orphans (SettleOrphans).
  void Enqueue(const std::shared_ptr<Change>& c);
  // A change that captures `inode`'s live record.
  void EnqueueRecord(const InodeRef& inode);
  // A builder for one name change (fs/name_change.h), stamped now, telling
  // the eviction order; ns_.mu() stays held until it is queued.
  NameChange NewNameChange() REQUIRES(ns_.mu()) {
    return NameChange(table_, eviction_.order(), NowNs());
  }
  // Queues a built name change: its entries become pending, then the
  // committer has it.
  void QueueNameChange(const NameChange& change) REQUIRES(ns_.mu());
  // A change that captures `inode`'s data once every write in flight now
  // has completed, for the caller to queue (after adding waiters).
  std::shared_ptr<Change> QueueDataChange(const InodeRef& inode, bool sync)
      REQUIRES(inode->mu());
  // If `inode` has staged data, writes in flight or a data change to
  // capture: submits the staged data and returns the change that captures
  // it, for the caller to queue once it let go of the lock (flush, rename,
  // close); else null.
  std::shared_ptr<Change> WriteOut(const InodeRef& inode) REQUIRES(inode->mu());
  // The files `c` made orphans (unlinked while open): once `c` is queued,
  // a file whose last handle closed meanwhile is deleted now (Release left
  // it: its delete must queue after `c`). REQUIRES: ns_.mu() held.
  void SettleOrphans(Change& c);
  // The last handle and the last name are gone: the change that deletes the
  // record, for the caller to queue once it let go of the lock.
  // REQUIRES: inode->orphan_queued.
  std::shared_ptr<Change> OrphanDelete(const InodeRef& inode) REQUIRES(inode->mu());
  // Committer callbacks.
  void BuildChange(Change& c, index::WriteBatch& batch);
  void ChangeCommitted(Change& c, Status st);
  Status FlushDevices();
  void FreeAfterReads(const InodeRef& inode, std::vector<Extent> extents);
  // A device read of the inode finished: frees what waited for it, and
  // gives back the pin that kept it.
  void FinishDeviceRead(InodePin pin);

  // --- write_behind.cc. REQUIRES: inode->mu() held unless said otherwise.
  // May let go of the lock and take it again (to wait for a buffer, for
  // space, or for the old bytes of a partly overwritten chunk); with
  // `may_wait` false it keeps the lock and returns kWouldWait instead,
  // having staged nothing.
  Status StageChunk(const InodeRef& inode, uint64_t ci, uint64_t write_lo, uint64_t write_hi,
                    bool may_wait) REQUIRES(inode->mu());
  void SubmitChunk(const InodeRef& inode, uint64_t ci) REQUIRES(inode->mu());
  void SubmitAllStaged(const InodeRef& inode) REQUIRES(inode->mu());
  // The writes of a submitted chunk version completed (with the first
  // error): installs it if still current; `pin` is the submission's.
  void OnChunkWritten(InodePin pin, uint64_t ci, std::shared_ptr<ChunkBuf> cb, Status st);
  Status TruncateData(const InodeRef& inode, uint64_t new_size) REQUIRES(inode->mu());
  // Pool buffer for staging; pushes staged chunks out while none is free.
  // REQUIRES: no inode->mu() held.
  device::PoolBuffer AcquireBuffer();
  // Every space reservation goes through here. Runs `reserve` (an
  // allocation of `bytes`); when it fails with ENOSPC, waits for the queued
  // commits (unlinks free space as they land) and runs it once more; if the
  // volume is still full and eviction is on, wakes the evictor and waits
  // for it, up to evict_wait_ms (Evictor::ReserveWaiting). A reservation
  // that succeeds tells the evictor (a pass starts at the high watermark).
  // `lock`, if given, is released for the waits (the caller re-checks what
  // it guards). Returns what the last run returned: ENOSPC when nothing
  // could be freed in time. With `may_wait` false, a first run that fails
  // with ENOSPC returns kWouldWait instead of waiting.
  Status WithSpace(uint64_t bytes, const std::function<Status()>& reserve, Mutex* lock,
                   bool may_wait = true);
  // WithSpace of one allocation of `bytes` placed by `hint`: its extents
  // in *out (left as they are on failure).
  Status AllocateWithSpace(uint64_t bytes, volume::PlacementHint hint, std::vector<Extent>* out,
                           Mutex* lock, bool may_wait = true);

  // --- cache_loads.cc
  // The cache entry holding all of [off, off + len) of one chunk, loaded or
  // loading, or null (other chunks, staged data, a hole, verify=on).
  std::shared_ptr<CachedChunk> CachedWhole(const InodeRef& i, uint64_t off, uint64_t len)
      REQUIRES(i->mu());
  // Runs fn(ok) when `c` has loaded, or now if it is not loading. A reader
  // waits for it from now on: if its load is a prefetch still queued behind
  // others, it is promoted to the read lane (io::Scheduler::Promote).
  void WhenLoaded(const std::shared_ptr<CachedChunk>& c, std::function<void(bool ok)> fn);
  // A loading cache entry for chunk `ci` of `i` at installed version
  // `seq` (`extents`), sized to its extents, with the bytes between them
  // zeroed; null if the chunk is cached already or there is no room.
  std::shared_ptr<CachedChunk> StartChunkLoad(const InodeRef& i, uint64_t ci, uint64_t seq,
                                              const std::vector<index::FileExtent>& extents,
                                              bool prefetch);
  // Starts loading the file's chunks into the cache (prefetch lane), within
  // the budgets. Returns the bytes it started loading. With `batch`, the
  // device reads are appended there for the caller to submit on the
  // prefetch lane (one submission for many files) instead of submitted now,
  // and the entries started to `entries`: a reader may find one and wait
  // before it is submitted, so the caller promotes those with waiters after
  // submitting (PromoteWaitedFor).
  // REQUIRES: inode->mu() held. The one Prefetch* that runs under a lock
  // its caller holds; every other (PrefetchIno, PrefetchFile,
  // PrefetchQueued, AttrAndPrefetch) takes what it needs and is called
  // holding none.
  uint64_t PrefetchLocked(const InodeRef& inode, std::vector<device::IoRequest>* batch = nullptr,
                          std::vector<std::shared_ptr<CachedChunk>>* entries = nullptr)
      REQUIRES(inode->mu());
  // Starts loading chunks [first, end) of `inode` that are neither cached
  // nor staged nor being written into the chunk cache, within its room;
  // their device reads are appended to `reqs` and the entries to `entries`
  // (if not null). Returns the bytes started. REQUIRES: inode->mu() held.
  uint64_t LoadChunksLocked(const InodeRef& inode, uint64_t first, uint64_t end,
                            std::vector<device::IoRequest>* reqs,
                            std::vector<std::shared_ptr<CachedChunk>>* entries)
      REQUIRES(inode->mu());
  // A read of [off, off + len) of `i`: for a file too large to load whole,
  // read on ahead of a reader that moves through it (device reads to
  // `reqs`, for the prefetch lane; entries to `entries`). REQUIRES: i->mu().
  void ReadAheadLocked(const InodeRef& i, uint64_t off, uint64_t len,
                       std::vector<device::IoRequest>* reqs,
                       std::vector<std::shared_ptr<CachedChunk>>* entries) REQUIRES(i->mu());
  // How far ahead of a reader of a large file its chunks are loaded.
  static constexpr uint64_t kReadAheadBytes = 16ull << 20;
  // --- cache_loads.cc: file memory (fs/file_memory.h), when options_.file_memory.
  // The file memory of `i` that stands for its bytes now (loading, loaded
  // or failed): the one its served opens use, or one of its current
  // version.
  std::shared_ptr<FileMemory> CurrentMemory(const InodeRef& i) REQUIRES(i->mu());
  // CurrentMemory unless its load failed.
  std::shared_ptr<FileMemory> HeldMemory(const InodeRef& i) REQUIRES(i->mu());
  // Whether `m` is loaded and holds the version `i` is at now (whatever
  // opens it serves).
  bool MemoryIsCurrent(const InodeRef& i, const FileMemory& m) REQUIRES(i->mu());
  // Loaded speculatively and not read yet, chunk cache and file memory.
  // Loads the cache dropped before they ended (.kvfs/drop_cache, room for
  // other files) still hold their memory until they end: their bytes on
  // the prefetch lane count too, or a loop of lookups and drops would queue
  // loads (and make their memory) without bound.
  uint64_t SpeculativeBytes() const {
    return std::max(ram_->speculative_bytes(), sched_->LaneBytes(io::Lane::kPrefetch));
  }
  // Whether `i` may be loaded into file memory: a regular file of at least
  // kMinFileMemoryBytes and at most prefetch_file_max_bytes, with a
  // version to hold (FileData::HasVersion).
  bool MemoryEligible(const InodeRef& i) REQUIRES(i->mu());
  // Starts loading `i` into a new file memory: its device reads are
  // appended to `reqs` for the caller to submit. Null when there is no room
  // (or no memory to be had). REQUIRES: MemoryEligible(i).
  std::shared_ptr<FileMemory> StartMemoryLoad(const InodeRef& i, bool prefetch,
                                              std::vector<device::IoRequest>* reqs)
      REQUIRES(i->mu());
  // The completion of a load of `i` in `reads` device reads (`bytes`
  // long, for the metric), for each of them: when the last completes,
  // finish(ok) (its target is loaded, or failed) and the load's end as a
  // device read of the file (FinishDeviceRead; counted now: BeginRead).
  // The one load bookkeeping of file memory and chunk cache loads.
  std::function<void(Status)> LoadCompletion(const InodeRef& i, size_t reads, uint64_t bytes,
                                             std::function<void(bool ok)> finish)
      REQUIRES(i->mu());
  // As WhenLoaded, for a file memory.
  void WhenMemoryLoaded(const std::shared_ptr<FileMemory>& m, std::function<void(bool ok)> fn);
  // file_ops.cc: a file written through opens served from its memory has
  // its size (and a newer mtime) there until the bytes are written out:
  // `a` says so (FileData::ServedAttrsOf).
  void ServedAttr(const InodeRef& i, Attr* a) REQUIRES(i->mu());
  // OK when `check` is null, or when it may access `i` as `want` asks
  // (fs/access.h CheckAccess), else EACCES. REQUIRES: i->mu() held.
  static Status MayAccessLocked(const InodeRef& i, const Caller* check, int want);
  // MayAccessLocked, taking i->mu() (only when `check` is set).
  static Status MayAccess(const InodeRef& i, const Caller* check, int want);
  // Write and search permission on directory `p` for `check`, as adding,
  // removing or replacing a name in it needs (EACCES). Sets
  // *everyone_searches (if non-null) from `p`'s mode. Takes p->mu().
  static Status MayChangeNamesIn(const InodeRef& p, const Caller* check,
                                 bool* everyone_searches = nullptr);
  // The sticky rule for removing or replacing `victim`, an entry of
  // directory `p`, for `check` (EPERM). Takes their mu()s in turn.
  static Status MayTakeName(const InodeRef& p, const InodeRef& victim, const Caller* check);
  // may_delete() of the entry `name` of directory `p` (unlink, rmdir, the
  // source of a rename), search permission on `p` checked before: the
  // entry's inode, ENOENT if there is none; then for `check` write
  // permission on `p` (EACCES) and the sticky rule (EPERM).
  Result<InodeRef> EntryToRemove(const InodeRef& p, std::string_view name, const Caller* check)
      REQUIRES_SHARED(ns_.mu());
  // The open's work under i->mu() (O_TRUNC, the use, prefetch, the open
  // counts); `served`: the memory the open is served from, or null.
  // With `pending`, `served` is a memory still loading that the open
  // waits for (OpenServed): counted as open now, so that an unlink while
  // it waits leaves an orphan the open can still use.
  Status OpenLocked(const InodeRef& i, int flags, KillPriv* kill,
                    const std::shared_ptr<FileMemory>& served, bool pending = false)
      REQUIRES(i->mu());
  // The open's work after i->mu(), once OpenLocked counted it: the readahead
  // notice of a read-only open, and its handle (served from `served`, or
  // not). Returns the handle.
  uint64_t AddOpenHandle(const InodeRef& i, int flags, std::shared_ptr<FileMemory> served);
  // file_ops.cc: copies the bytes of `m` (what the kernel wrote into it
  // through served opens) into the file through handle `fh` (write-behind,
  // as write(2) would), one write-out of `m` at a time.
  // REQUIRES: i->mu() not held.
  Status WriteOutMemory(uint64_t fh, const InodeRef& i, FileMemory& m);
  // Promotes the loads of `entries` that a reader waits for, and clears it.
  void PromoteWaitedFor(std::vector<std::shared_ptr<CachedChunk>>* entries);
  // The prefetcher's work (prefetch thread): the looked-up inodes still in
  // the table, then the readahead guesses that are files with a name.
  void PrefetchQueued(const std::vector<InodeRef>& looked_up, const std::vector<uint64_t>& guesses);
  static constexpr size_t kRetainedPrefetches = 4096;
  // Readahead guesses kept in the table at most.
  static constexpr size_t kRetainedReadahead =
      2 * ReadaheadDetector::kStreams * ReadaheadDetector::kFiles;

  // Smaller files stay in the chunk cache: making a file's memory costs a
  // few system calls, which a stat storm over tiny files (prefetching each)
  // would pay per name, for a load that saves one request.
  static constexpr uint64_t kMinFileMemoryBytes = 64 << 10;
  // ~200,000 entries of 120-byte names: a connector's working set of keys
  // and the directories they sit in.
  static constexpr size_t kEntryCacheBytes = 48ull << 20;

  // The index, the devices and the staging buffer pool (volume_.buffers()).
  volume::Volume& volume_;
  // Every device request of the filesystem goes through the lanes.
  std::unique_ptr<io::Scheduler> sched_;
  const FileSystemOptions options_;
  // verify=on: checks extents read from the device (fs/read_verify.h).
  ReadVerifier verifier_{options_.verify_reads};
  FsMetrics metrics_;
  // The chunk cache and file memory, with their memory and its
  // registration (fs/ram_cache.h).
  std::unique_ptr<RamCache> ram_;

  // Lock order: ns_.mu() (fs/namespace.h), then an InodeState's mu, then
  // the table's, handles', staged_'s, retained_'s and the
  // committer's.
  // The victim order's (eviction_) is taken last, after any of them.
  Namespace ns_{volume_.index(), kEntryCacheBytes};

  // Declared before everything that holds pins (the committer's queued
  // changes, retained prefetches): destroyed after them.
  InodeTable table_;
  HandleTable handles_;

  // Inodes with staged chunks, pushed out when staging buffers run out.
  StagedInodes staged_;

  // Inodes the cache loaded without a kernel lookup, kept in the table:
  // batch PREFETCHes and readahead guesses, one list each
  // (fs/retained_pins.h).
  RetainedLoads retained_{kRetainedPrefetches, kRetainedReadahead};

  std::unique_ptr<Committer> committer_;
  // Holds pins (table_) and queues changes (committer_): stopped and
  // destroyed before both.
  std::unique_ptr<AtimeLog> atime_;
  // The victim order, the pass thread (which unlinks through everything
  // above; stopped at Shutdown()) and the listener (fs/eviction_part.h).
  Eviction eviction_;
  // Last: stopped first (its work uses everything above).
  std::unique_ptr<Prefetcher> prefetcher_;
  bool shut_down_ = false;
  // The generation of the inodes this mount makes (FUSE file handles are
  // inode number + generation). Random per mount, not 0 or 1 (older
  // records' 1): an inode number the index never committed (a crash came
  // first) is allocated again by a later mount, and a file handle to the
  // lost inode must not open the new one.
  const uint32_t generation_ = RandomGeneration();
  static uint32_t RandomGeneration();
};

}  // namespace kvfs::fs
