// FileSystem::Impl: state shared by namespace_ops.cc, file_ops.cc and
// file_system.cc. Internal to fs/.
#pragma once

#include <fcntl.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>
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

#include "fs/cache_registrar.h"
#include "fs/chunk_cache.h"
#include "common/format.h"
#include "common/large_buffer.h"
#include "common/rw_lock.h"
#include "fs/committer.h"
#include "fs/entry_cache.h"
#include "fs/file_system.h"
#include "fs/inode_state.h"
#include "fs/read_verify.h"
#include "fs/stats.h"
#include "io/scheduler.h"

namespace kvfs::fs {

using InodeRef = std::shared_ptr<InodeState>;

struct Handle {
  InodeRef inode;
  int flags = 0;
  bool writable() const { return (flags & O_ACCMODE) != O_RDONLY; }
};

struct DirHandle {
  uint64_t ino = 0;
  struct Item {
    std::string name;
    uint64_t ino;
    uint32_t mode;
  };
  std::vector<Item> items;  // snapshot taken at OpenDir
};

// An entry changed by a queued change that is not committed yet.
struct PendingEntry {
  uint64_t child = 0;  // 0: deleted
  int pending = 0;     // queued changes that set it
};

// ENAMETOOLONG past kMaxNameLen; EINVAL for "", or a name with '/' or NUL.
inline Status CheckName(std::string_view name) {
  if (name.size() > kMaxNameLen) {
    return Status::Error(ENAMETOOLONG, "name of " + std::to_string(name.size()) + " bytes");
  }
  if (name.empty() || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    return Status::Error(EINVAL, "invalid name");
  }
  return Status::OK();
}

// Drops the one name of `v` (== *ref; a regular file or an empty directory)
// inside change `c`: an orphan if it is open (opens, read under table_mu),
// deleted otherwise (rename-over,
// unlink and WriteFile's replace). REQUIRES: ns_mu_ held (namespace_ops.cc).
void DropLink(InodeState& v, const InodeRef& ref, Change& c, std::mutex& table_mu, int64_t now);

class FileSystem::Impl {
 public:
  Impl(volume::Volume& volume, const FileSystemOptions& options,
       std::unique_ptr<CacheRegistrar> cache_registrar, std::unique_ptr<BuddyArena> cache_arena);
  ~Impl();

  // --- file_system.cc
  Status Shutdown();
  Status FlushAll();
  FsStats StatFs();
  Status PrefetchIno(uint64_t ino);
  Result<uint64_t> ResolvePath(std::string_view path);
  Status DropCache();
  StatsSnapshot Stats();
  static Attr ToAttr(const index::Inode& rec);
  // The scheduler's options: the engine's defaults with options.lane_commands.
  static io::SchedulerOptions LaneOptions(const volume::Volume& volume,
                                          const FileSystemOptions& options);
  static int64_t NowNs();

  // --- namespace_ops.cc
  Result<Attr> Lookup(uint64_t parent, std::string_view name);
  Result<Attr> LookupInner(uint64_t parent, std::string_view name);
  // The attributes of a looked-up (or getattr'd) inode; queues a prefetch
  // of a regular file that has a name when prefetch=lookup, with
  // `only_idle` only if it is not open and has no uncommitted writes.
  Attr AttrAndPrefetch(const InodeRef& inode, bool only_idle);
  void Forget(uint64_t ino, uint64_t nlookup);
  Result<Attr> GetAttr(uint64_t ino);
  Result<Attr> SetAttr(uint64_t ino, const SetAttrRequest& req);
  Result<Attr> MkDir(uint64_t parent, std::string_view name, uint32_t mode, const Caller& caller);
  Status RmDir(uint64_t parent, std::string_view name);
  Status Unlink(uint64_t parent, std::string_view name);
  Status UnlinkLocked(uint64_t parent, std::string_view name);  // REQUIRES: ns_mu_ held
  Status Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                std::string_view new_name, unsigned flags);
  Result<uint64_t> OpenDir(uint64_t ino);
  Status ReadDir(uint64_t dh, uint64_t off,
                 const std::function<bool(std::string_view, uint64_t, uint32_t, uint64_t)>& fn);
  void ReleaseDir(uint64_t dh);

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
  // REQUIRES: inode->mu held; off + len <= the file's size.
  void PlanRead(const InodeRef& i, uint64_t off, uint64_t len, char* dst, uint64_t room,
                ReadPlan* plan);
  // Runs a plan with work (the caller has pinned `i` once for
  // FinishDeviceRead, and submits plan.loads itself when it does not call
  // this). done(status) runs once, on an engine thread if anything went to
  // the device, after every byte is in dst.
  void ExecuteRead(const InodeRef& i, ReadPlan plan, char* dst, CancelFlag cancel,
                   std::function<void(Status)> done);

  // --- file_ops.cc
  Result<Created> Create(uint64_t parent, std::string_view name, uint32_t mode, int flags,
                         const Caller& caller);
  Result<uint64_t> Open(uint64_t ino, int flags);
  void Read(uint64_t fh, uint64_t off, size_t size, ReadDone done, CancelFlag cancel);
  Result<size_t> Write(uint64_t fh, uint64_t off, std::span<const char> data);
  bool WriteMayWait(uint64_t fh, uint64_t off, size_t len);
  Result<size_t> WriteInner(uint64_t fh, uint64_t off, std::span<const char> data);
  Status Flush(uint64_t fh);
  void Release(uint64_t fh);
  void Fsync(uint64_t fh, std::function<void(Status)> done);
  Status Fallocate(uint64_t fh, int mode, uint64_t off, uint64_t len);

  // --- whole_file_ops.cc: the batch ioctl's calls (contracts in file_system.h)
  Result<Attr> LookupPath(uint64_t dir, std::string_view path, const Caller& caller);
  void ExistsPaths(uint64_t dir, std::span<const std::string_view> paths, const Caller& caller,
                   std::span<int> codes);
  // `attempts`: walks of `path` while each finds a file replaced meanwhile.
  void ReadFile(uint64_t dir, std::string_view path, uint64_t off, std::span<char> dest,
                const Caller& caller, std::function<void(Result<size_t>)> done,
                int attempts = 3);
  void WriteFile(uint64_t dir, std::string_view path, std::span<const char> data,
                 const Caller& caller, std::function<void(Status)> done);
  Status DeleteFile(uint64_t dir, std::string_view path, const Caller& caller);
  Result<uint64_t> PrefetchFile(uint64_t dir, std::string_view path, const Caller& caller);

 private:
  friend class FileSystem;

  // Inode table. Returns the live state, loading it from the index.
  Result<InodeRef> GetInode(uint64_t ino);
  // REQUIRES: ns_mu_ held. A new regular file (returned open once, as
  // create(2) does) or directory (`mode` has the type) named `name` in
  // `parent`, with one kernel lookup; its change is queued. EEXIST, ENOTDIR,
  // ENOENT for a removed parent.
  Result<InodeRef> AddChild(uint64_t parent, std::string_view name, uint32_t mode,
                            const Caller& caller);
  // REQUIRES: ns_mu_ held. The child of (parent, name), overlay first.
  Result<uint64_t> ResolveEntry(uint64_t parent, std::string_view name);
  // Drops the table's reference when nothing pins the inode any more.
  void MaybeEvict(const InodeRef& inode);  // REQUIRES: table_mu_ held
  // GetInode() plus one pin (pending_changes) taken while the table still
  // holds that very state, so it cannot be evicted under the caller (and a
  // later GetInode() cannot load a stale copy). Unpin() gives it back.
  Result<InodeRef> GetPinned(uint64_t ino) { return GetCounted(ino, &InodeState::pending_changes); }
  // GetInode() plus one on `*count` (a pin or the kernel's lookup count),
  // taken under table_mu_ on the state the table holds (reloaded if it was
  // evicted meanwhile).
  template <typename T>
  Result<InodeRef> GetCounted(uint64_t ino, T InodeState::*count);
  void Unpin(const InodeRef& inode);
  // whole_file_ops.cc: resolves `path` under `dir` for `caller` (search
  // permission on every directory walked). With `want_parent`, stops before
  // the last component: *parent is the directory that holds it and *leaf
  // its name; otherwise *parent is the inode `path` names. Returns it pinned.
  // REQUIRES: ns_mu_ held.
  Status WalkPath(uint64_t dir, std::string_view path, const Caller& caller, bool want_parent,
                  InodeRef* parent, std::string_view* leaf);
  // Keeps an inode prefetched by the batch in the table (its cache entries
  // are keyed by the InodeState), for the newest kRetainedPrefetches.
  // `list` is retained_prefetches_ (batch PREFETCH, the newest
  // `max`) or retained_readahead_ (readahead guesses: their own, smaller
  // list, so that a long load loop does not push out what a client asked
  // for). REQUIRES: table_mu_ not held.
  void RetainPrefetched(const InodeRef& inode, std::deque<InodeRef>* list, size_t max);
  void RetainPrefetched(const InodeRef& inode) {
    RetainPrefetched(inode, &retained_prefetches_, kRetainedPrefetches);
  }
  static constexpr size_t kRetainedPrefetches = 4096;

  // Changes. REQUIRES for Queue*: ns_mu_ held when entry ops are involved,
  // so the overlay and the queue agree on order.
  std::shared_ptr<Change> NewChange();
  // OK, or EROFS once the index failed a write (Index::failure) or a
  // device flush before a commit failed (Committer::failure): every change
  // after that would be lost, so none is accepted.
  Status Writable() const;
  void Enqueue(const std::shared_ptr<Change>& c);
  void SetPendingEntry(uint64_t parent, std::string_view name, uint64_t child);  // REQUIRES: ns_mu_
  // Queues a change that captures `inode`'s data once every write in flight
  // now has completed. REQUIRES: inode->mu held.
  std::shared_ptr<Change> QueueDataChange(const InodeRef& inode, bool sync);
  // Committer callbacks.
  void BuildChange(Change& c, index::WriteBatch& batch);
  void ChangeCommitted(Change& c, Status st);
  Status FlushDevices();

  // Data path helpers, REQUIRES: inode->mu held unless said otherwise.
  Status StageChunk(const InodeRef& inode, std::unique_lock<std::mutex>& lock, uint64_t ci,
                    uint64_t write_lo, uint64_t write_hi);
  void SubmitChunk(const InodeRef& inode, uint64_t ci);
  void SubmitAllStaged(const InodeRef& inode);
  void OnChunkWritten(const InodeRef& inode, uint64_t ci, std::shared_ptr<ChunkBuf> cb,
                      Status st);
  Status TruncateData(const InodeRef& inode, uint64_t new_size);
  void FreeAfterReads(const InodeRef& inode, std::vector<Extent> extents);
  void FinishDeviceRead(const InodeRef& inode);  // a device read finished (takes mu)
  // The cache entry holding all of [off, off + len) of one chunk, loaded or
  // loading, or null (other chunks, staged data, a hole, verify=on).
  // REQUIRES: inode->mu held.
  std::shared_ptr<CachedChunk> CachedWhole(const InodeRef& i, uint64_t off, uint64_t len);
  // Runs fn(ok) when `c` has loaded, or now if it is not loading. A reader
  // waits for it from now on: if its load is a prefetch still queued behind
  // others, it is promoted to the read lane (io::Scheduler::Promote).
  void WhenLoaded(const std::shared_ptr<CachedChunk>& c, std::function<void(bool ok)> fn);
  // A loading cache entry for chunk `ci` (state `cs`) of `i`, sized to its
  // extents, with the bytes between them zeroed; null if the chunk is
  // cached already or there is no room.
  std::shared_ptr<CachedChunk> StartChunkLoad(const InodeRef& i, uint64_t ci, const ChunkState& cs,
                                              bool prefetch);
  // Starts loading the file's chunks into the cache (prefetch lane), within
  // the budgets. Returns the bytes it started loading. With `batch`, the
  // device reads are appended there for the caller to submit on the
  // prefetch lane (one submission for many files) instead of submitted now,
  // and the entries started to `entries`: a reader may find one and wait
  // before it is submitted, so the caller promotes those with waiters after
  // submitting (PromoteWaitedFor).
  // REQUIRES: inode->mu held.
  uint64_t Prefetch(const InodeRef& inode, std::vector<device::IoRequest>* batch = nullptr,
                    std::vector<std::shared_ptr<CachedChunk>>* entries = nullptr);
  // Promotes the loads of `entries` that a reader waits for, and clears it.
  void PromoteWaitedFor(std::vector<std::shared_ptr<CachedChunk>>* entries);
  // Lookup-driven prefetch runs on prefetch_thread_, so that a stat storm's
  // replies do not wait for cache allocation and I/O submission. Queues at
  // most kMaxQueuedPrefetches inodes (speculative work: more are dropped).
  void QueuePrefetch(InodeRef inode);
  void PrefetchLoop();
  // Whether a producer that just queued work must signal the thread (once
  // until the thread next finds its queues empty). REQUIRES: prefetch_mu_.
  bool NeedsWakeLocked();
  // Inode-order readahead. Connectors load a request's keys in the order
  // they stored them, one key at a time, and files stored one after another
  // get consecutive inode numbers. So when files are opened for reading in
  // ascending inode order (small gaps allowed: directories made between
  // keys), the next kReadaheadFiles inodes are queued for prefetch: the
  // device works kReadaheadFiles keys ahead of a serial load loop. Up to
  // kReadaheadStreams such loops (batches in flight) are followed at once.
  void NoteReadOpen(uint64_t ino);
  // ~200,000 entries of 120-byte names: a connector's working set of keys
  // and the directories they sit in.
  static constexpr size_t kEntryCacheBytes = 48ull << 20;
  // Staging slots WriteMayWait leaves for writers racing the checked write.
  static constexpr size_t kWriteSlotMargin = 4;
  static constexpr uint64_t kReadaheadFiles = 8;
  static constexpr uint64_t kReadaheadMaxGap = 4;
  static constexpr size_t kReadaheadStreams = 16;
  // Readahead guesses kept in the table at most (RetainPrefetched).
  static constexpr size_t kRetainedReadahead = 2 * kReadaheadStreams * kReadaheadFiles;
  static constexpr size_t kMaxQueuedPrefetches = 4096;
  static constexpr std::chrono::microseconds kPrefetchGather{200};
  // Frees extents in the allocator now; logs a double free.
  void FreeNow(const std::vector<Extent>& extents);
  // Pool buffer for staging; pushes staged chunks out while none is free.
  device::PoolBuffer AcquireBuffer();
  // Last name and last handle gone: the record goes away with this change.
  void MarkDeletedIfUnused(const InodeRef& inode, Change& c);  // REQUIRES: mu

  volume::Volume& volume_;
  // Every device request of the filesystem goes through the lanes.
  std::unique_ptr<io::Scheduler> sched_;
  device::BufferPool& pool_;
  const FileSystemOptions options_;
  // verify=on: checks extents read from the device (fs/read_verify.h).
  ReadVerifier verifier_{options_.verify_reads};

  // Namespace lock: serializes namespace changes and the overlay. Lookups
  // that change nothing it guards take it shared, so index reads of a
  // batch's STAT entries (and of FUSE lookups) run in parallel; a waiting
  // change goes before new lookups (common/rw_lock.h).
  RwLock ns_mu_;
  // (parent, name) keys, comparable with a (parent, string_view) so that a
  // lookup builds no string (lookups far outnumber pending changes).
  struct EntryKeyLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      if (a.first != b.first) return a.first < b.first;
      return std::string_view(a.second) < std::string_view(b.second);
    }
  };
  std::map<std::pair<uint64_t, std::string>, PendingEntry, EntryKeyLess> pending_entries_;  // GUARDED_BY(ns_mu_)
  // What names resolve to, committed or not (ResolveEntry); changes are put
  // with SetPendingEntry under ns_mu_ held exclusively.
  EntryCache entry_cache_{kEntryCacheBytes};

  std::mutex table_mu_;
  std::unordered_map<uint64_t, InodeRef> inodes_;  // GUARDED_BY(table_mu_)

  std::mutex handles_mu_;
  std::unordered_map<uint64_t, Handle> handles_;                         // GUARDED_BY(handles_mu_)
  std::unordered_map<uint64_t, std::unique_ptr<DirHandle>> dir_handles_;  // GUARDED_BY(handles_mu_)
  std::atomic<uint64_t> next_fh_{1};

  // All InodeStates with staged chunks, for pushing out under pressure.
  std::mutex staged_mu_;
  std::unordered_map<uint64_t, std::weak_ptr<InodeState>> staged_inodes_;  // GUARDED_BY(staged_mu_)

  // Inodes pinned by RetainPrefetched(), oldest first. GUARDED_BY(table_mu_)
  std::deque<InodeRef> retained_prefetches_;
  std::deque<InodeRef> retained_readahead_;  // GUARDED_BY(table_mu_)

  std::atomic<uint64_t> next_token_{1};
  FsMetrics metrics_;
  // The cache's memory; destroyed after the cache and its entries, and
  // after the registrar has unregistered it.
  std::unique_ptr<BuddyArena> cache_arena_;
  std::unique_ptr<CacheRegistrar> cache_registrar_;
  std::unique_ptr<ChunkCache> cache_;
  std::unique_ptr<Committer> committer_;

  std::mutex prefetch_mu_;
  std::condition_variable prefetch_cv_;
  std::vector<InodeRef> prefetch_queue_;  // GUARDED_BY(prefetch_mu_)
  std::vector<uint64_t> prefetch_inos_;   // GUARDED_BY(prefetch_mu_): readahead
  struct ReadaheadStream {
    uint64_t last_ino = 0;  // last inode this stream opened
    uint64_t next_ino = 0;  // first inode not queued yet
    uint64_t used = 0;      // NoteReadOpen count when last matched (LRU)
  };
  std::array<ReadaheadStream, kReadaheadStreams> readahead_{};  // GUARDED_BY(prefetch_mu_)
  uint64_t readahead_clock_ = 0;                                 // GUARDED_BY(prefetch_mu_)
  bool prefetch_stop_ = false;            // GUARDED_BY(prefetch_mu_)
  bool prefetch_wake_sent_ = false;       // GUARDED_BY(prefetch_mu_): signalled, queues not yet found empty
  std::thread prefetch_thread_;           // runs PrefetchLoop()
  bool shut_down_ = false;
};

}  // namespace kvfs::fs
