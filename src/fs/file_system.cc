// FileSystem: construction, shutdown, the committer's callbacks, the inode
// table, and the forwarding of the public API to Impl.
#include "fs/file_system.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <chrono>

#include "common/format.h"
#include "fs/file_system_impl.h"

namespace kvfs::fs {

// ---------------------------------------------------------------- Impl core

io::SchedulerOptions FileSystem::Impl::LaneOptions(const volume::Volume& volume,
                                                   const FileSystemOptions& options) {
  io::SchedulerOptions o = io::SchedulerOptions::ForEngine(volume.engine_options());
  for (size_t i = 0; i < io::kLaneCount; ++i) {
    if (options.lane_commands[i] == 0) continue;
    o.limits[i].max_commands = options.lane_commands[i];
    o.limits[i].max_bytes = uint64_t{options.lane_commands[i]} * o.command_bytes;
  }
  return o;
}

FileSystem::Impl::Impl(volume::Volume& volume, const FileSystemOptions& options,
                       std::unique_ptr<CacheRegistrar> cache_registrar,
                       std::unique_ptr<BuddyArena> cache_arena)
    : volume_(volume),
      sched_(std::make_unique<io::Scheduler>(volume.io(), LaneOptions(volume, options))),
      pool_(volume.buffers()),
      options_(options),
      cache_arena_(std::move(cache_arena)),
      cache_registrar_(std::move(cache_registrar)),
      cache_(std::make_unique<ChunkCache>(*cache_arena_)) {
  committer_ = std::make_unique<Committer>(
      volume_.index(), [this](Change& c, index::WriteBatch& b) { BuildChange(c, b); },
      [this](Change& c, Status st) { ChangeCommitted(c, st); }, [this] { return FlushDevices(); },
      options_.commit_interval_ms);
  prefetch_thread_ = std::thread([this] { PrefetchLoop(); });
}

FileSystem::Impl::~Impl() {
  Shutdown().ignore();  // errors were logged; nobody is left to tell
  {
    std::lock_guard<std::mutex> l(prefetch_mu_);
    prefetch_stop_ = true;
  }
  prefetch_cv_.notify_one();
  prefetch_thread_.join();  // before the scheduler it submits to goes
  sched_.reset();  // every request completes (their callbacks may queue changes)
  // No I/O into the cache is left: nothing registers any more, and what
  // was registered is unregistered.
  cache_registrar_->Stop();
  committer_.reset();
  std::lock_guard<std::mutex> l(table_mu_);
  inodes_.clear();  // returns staging buffers to the pool
}

int64_t FileSystem::Impl::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Attr FileSystem::Impl::ToAttr(const index::Inode& rec) {
  Attr a;
  a.ino = rec.ino;
  a.mode = rec.mode;
  a.nlink = rec.nlink;
  a.uid = rec.uid;
  a.gid = rec.gid;
  bool dir = (rec.mode & S_IFMT) == S_IFDIR;
  a.size = dir ? kBlockSize : rec.size;
  a.blocks = dir ? kBlockSize / 512 : AlignUp(rec.size, kBlockSize) / 512;
  a.atime_ns = rec.atime_ns;
  a.mtime_ns = rec.mtime_ns;
  a.ctime_ns = rec.ctime_ns;
  a.generation = rec.generation;
  return a;
}

Status FileSystem::Impl::FlushDevices() {
  for (uint32_t d = 0; d < sched_->device_count(); ++d) {
    KVFS_RETURN_IF_ERROR(sched_->FlushSync(io::Lane::kMeta, d));
  }
  return Status::OK();
}

Result<InodeRef> FileSystem::Impl::GetInode(uint64_t ino) {
  {
    std::lock_guard<std::mutex> l(table_mu_);
    auto it = inodes_.find(ino);
    if (it != inodes_.end()) return it->second;
  }
  // Not in memory, so nothing about it is pending: the index is current.
  KVFS_ASSIGN_OR_RETURN(index::Inode rec, volume_.index().GetInode(ino));
  auto state = std::make_shared<InodeState>(rec, next_token_++);
  state->durable_size = rec.size;
  state->durable_nlink = rec.nlink;
  for (const index::FileExtent& fe : rec.extents) {
    uint64_t ci = fe.file_off / kChunkBytes;
    if (fe.file_off + fe.ext.len > (ci + 1) * kChunkBytes) {
      return Status::Error(EUCLEAN, "inode " + std::to_string(ino) + ": extent at file offset " +
                                        std::to_string(fe.file_off) +
                                        " crosses a chunk boundary (run fsck.kvfs)");
    }
    state->chunks[ci].extents.push_back(fe);
  }
  state->rec.extents.clear();
  std::lock_guard<std::mutex> l(table_mu_);
  auto [it, inserted] = inodes_.emplace(ino, state);
  return it->second;  // another thread may have loaded it first: use theirs
}

template <typename T>
Result<InodeRef> FileSystem::Impl::GetCounted(uint64_t ino, T InodeState::*count) {
  for (;;) {
    KVFS_ASSIGN_OR_RETURN(InodeRef i, GetInode(ino));
    std::lock_guard<std::mutex> l(table_mu_);
    auto it = inodes_.find(ino);
    if (it == inodes_.end() || it->second != i) continue;  // evicted meanwhile: reload
    ((*i).*count)++;
    return i;
  }
}

template Result<InodeRef> FileSystem::Impl::GetCounted(uint64_t, int InodeState::*);
template Result<InodeRef> FileSystem::Impl::GetCounted(uint64_t, uint64_t InodeState::*);

void FileSystem::Impl::Unpin(const InodeRef& inode) {
  std::lock_guard<std::mutex> l(table_mu_);
  inode->pending_changes--;
  MaybeEvict(inode);
}

void FileSystem::Impl::MaybeEvict(const InodeRef& inode) {
  if (inode->lookups == 0 && inode->opens == 0 && inode->pending_changes == 0 &&
      inode->rec.ino != kRootIno) {
    auto it = inodes_.find(inode->rec.ino);
    if (it != inodes_.end() && it->second == inode) {
      inodes_.erase(it);
      cache_->EraseOwner(inode->token);
    }
  }
}

std::shared_ptr<Change> FileSystem::Impl::NewChange() { return std::make_shared<Change>(); }

Status FileSystem::Impl::Writable() const {
  Status failure = volume_.index().failure();
  if (failure.ok()) failure = committer_->failure();
  if (failure.ok()) return Status::OK();
  return Status::Error(EROFS, "a commit failed (" + failure.ToString() +
                                  "); no more changes until kvfs is remounted");
}

void FileSystem::Impl::Enqueue(const std::shared_ptr<Change>& c) {
  {
    std::lock_guard<std::mutex> l(table_mu_);
    for (auto& i : c->inodes) i->pending_changes++;
    for (auto& i : c->deletes) i->pending_changes++;
  }
  committer_->Enqueue(c);
}

void FileSystem::Impl::SetPendingEntry(uint64_t parent, std::string_view name, uint64_t child) {
  PendingEntry& e = pending_entries_[{parent, std::string(name)}];
  e.child = child;
  e.pending++;
  entry_cache_.Put(parent, name, child);
}

std::shared_ptr<Change> FileSystem::Impl::QueueDataChange(const InodeRef& inode, bool sync) {
  auto c = NewChange();
  c->inodes.push_back(inode);
  c->sync = sync;
  if (inode->inflight_writes > 0) {
    c->gates = 1;
    inode->gated.push_back(c);
  }
  return c;  // the caller adds waiters, then Enqueue()s
}

// Captures the live record of `inode` for the index. The size is held back
// to the start of the first chunk past the last captured size whose new data
// is not written yet, so a crash never shows a grown file with a hole where
// unwritten data should be. REQUIRES: inode->mu held.
static index::Inode CaptureRecord(InodeState& x, std::vector<Extent>* frees) {
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
    const uint64_t limit = AlignUp(size, kBlockSize);
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
  x.data_change_queued = false;
  return r;
}

void FileSystem::Impl::BuildChange(Change& c, index::WriteBatch& batch) {
  for (const Change::Delta& d : c.deltas) {
    std::lock_guard<std::mutex> l(d.inode->mu);
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
      std::lock_guard<std::mutex> l(inode->mu);
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
      std::lock_guard<std::mutex> l(inode->mu);
      inode->delete_built = true;
      for (auto& [ci, cs] : inode->chunks) {
        for (const auto& fe : cs.extents) frees.push_back(fe.ext);
        cs.extents.clear();
      }
      frees.insert(frees.end(), inode->free_pending.begin(), inode->free_pending.end());
      inode->free_pending.clear();
    }
    batch.DeleteInode(inode->rec.ino);
    cache_->EraseOwner(inode->token);
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
  if (!c.entry_ops.empty()) {
    std::lock_guard<RwLock> l(ns_mu_);
    for (const EntryOp& op : c.entry_ops) {
      auto it = pending_entries_.find(std::make_pair(op.parent, op.name));
      if (it != pending_entries_.end() && --it->second.pending == 0) pending_entries_.erase(it);
      // A change the index did not take: names resolve as the index has
      // them, as they would after a remount.
      if (!st.ok()) entry_cache_.Erase(op.parent, op.name);
    }
  }
  std::lock_guard<std::mutex> l(table_mu_);
  for (auto& i : c.inodes) {
    i->pending_changes--;
    MaybeEvict(i);
  }
  for (auto& i : c.deletes) {
    i->pending_changes--;
    MaybeEvict(i);
  }
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
    std::lock_guard<std::mutex> l(inode->mu);
    if (inode->reads_inflight > 0) {
      inode->free_after_reads.insert(inode->free_after_reads.end(), extents.begin(),
                                     extents.end());
      return;
    }
  }
  FreeNow(extents);
}

void FileSystem::Impl::FinishDeviceRead(const InodeRef& inode) {
  std::vector<Extent> frees;
  {
    std::lock_guard<std::mutex> l(inode->mu);
    if (--inode->reads_inflight == 0) frees.swap(inode->free_after_reads);
  }
  FreeNow(frees);
  std::lock_guard<std::mutex> l(table_mu_);
  inode->pending_changes--;
  MaybeEvict(inode);
}

Status FileSystem::Impl::FlushAll() {
  std::vector<InodeRef> all;
  {
    std::lock_guard<std::mutex> l(table_mu_);
    for (auto& [ino, i] : inodes_) all.push_back(i);
  }
  for (auto& i : all) {
    std::unique_lock<std::mutex> l(i->mu);
    if (!i->is_reg()) continue;
    SubmitAllStaged(i);
    if (i->inflight_writes > 0 || i->data_change_queued) {
      auto c = QueueDataChange(i, false);
      l.unlock();
      Enqueue(c);
    }
  }
  return committer_->Drain(false);
}

void FileSystem::Impl::QueuePrefetch(InodeRef inode) {
  {
    std::lock_guard<std::mutex> l(prefetch_mu_);
    if (prefetch_queue_.size() >= kMaxQueuedPrefetches) return;
    prefetch_queue_.push_back(std::move(inode));
    if (!NeedsWakeLocked()) return;
  }
  prefetch_cv_.notify_one();
}

bool FileSystem::Impl::NeedsWakeLocked() {
  if (prefetch_wake_sent_) return false;  // the thread will take this work too
  prefetch_wake_sent_ = true;
  return true;
}

void FileSystem::Impl::NoteReadOpen(uint64_t ino) {
  {
    std::lock_guard<std::mutex> l(prefetch_mu_);
    const uint64_t now = ++readahead_clock_;
    ReadaheadStream* s = nullptr;
    ReadaheadStream* oldest = &readahead_[0];
    for (ReadaheadStream& r : readahead_) {
      if (r.last_ino == ino) {  // the same file again
        r.used = now;
        return;
      }
      if (r.last_ino != 0 && ino > r.last_ino && ino - r.last_ino <= kReadaheadMaxGap) s = &r;
      if (r.used < oldest->used) oldest = &r;
    }
    if (s == nullptr) {  // not the next file of a stream: maybe the first of one
      *oldest = ReadaheadStream{ino, ino + 1, now};
      return;
    }
    s->last_ino = ino;
    s->used = now;
    const uint64_t end = ino + 1 + kReadaheadFiles;
    if (prefetch_inos_.size() >= kMaxQueuedPrefetches) return;
    for (uint64_t i = std::max(s->next_ino, ino + 1); i < end; ++i) prefetch_inos_.push_back(i);
    s->next_ino = std::max(s->next_ino, end);
    if (!NeedsWakeLocked()) return;
  }
  prefetch_cv_.notify_one();
}

void FileSystem::Impl::PrefetchLoop() {
  std::vector<InodeRef> batch;
  std::vector<uint64_t> inos;
  std::vector<device::IoRequest> reqs;
  std::vector<std::shared_ptr<CachedChunk>> entries;
  bool gather_first = false;  // the last pass took only what woke the thread
  for (;;) {
    {
      std::unique_lock<std::mutex> l(prefetch_mu_);
      // Lets producers queue for kPrefetchGather; false: stop.
      auto gather = [&] {
        l.unlock();
        std::this_thread::sleep_for(kPrefetchGather);
        l.lock();
        return !prefetch_stop_;
      };
      // A storm's next lookups, if they come, are gathered before the
      // thread would sleep again and need a wake-up per lookup.
      if (gather_first && !gather()) return;
      bool woken = false;  // the queues were empty: a producer woke this thread
      prefetch_cv_.wait(l, [this, &woken] {
        if (prefetch_queue_.empty() && prefetch_inos_.empty()) {
          // Nothing to take (DropCache may have emptied the queues after a
          // producer signalled): the next producer must signal again.
          prefetch_wake_sent_ = false;
          woken = true;
          return prefetch_stop_;
        }
        return true;
      });
      if (prefetch_stop_) return;
      // What woke the thread goes to the device at once: the device is
      // idle, and a request's first lookup is the key it loads first
      // (gathering it too left the device idle ~0.5 ms per 32-key request,
      // 8% of a 256 KiB one). What queued meanwhile is a stat storm's
      // next lookups: gather them for a moment, so that the storm costs
      // one wake-up and one device submission per kPrefetchGather instead
      // of one per lookup (with two CPUs, each wake-up took a CPU from the
      // lookups). Producers do not signal while the thread is awake.
      if (!woken && !gather_first && !gather()) return;
      gather_first = woken;
      batch.swap(prefetch_queue_);
      inos.swap(prefetch_inos_);
    }
    for (const InodeRef& inode : batch) {
      {
        // Evicted since it was queued (the kernel forgot it): its cache
        // entries would belong to nobody. Pinned while its reads are set up
        // (they pin it themselves until they end).
        std::lock_guard<std::mutex> t(table_mu_);
        auto it = inodes_.find(inode->ino);
        if (it == inodes_.end() || it->second != inode) continue;
        inode->pending_changes++;
      }
      {
        std::lock_guard<std::mutex> l(inode->mu);
        Prefetch(inode, &reqs, &entries);
      }
      Unpin(inode);
    }
    if (!reqs.empty()) sched_->Submit(io::Lane::kPrefetch, reqs);
    reqs.clear();
    PromoteWaitedFor(&entries);
    batch.clear();  // drops the references outside prefetch_mu_
    // Readahead guesses: an inode that is gone, a directory, a file being
    // deleted or an unlinked one still open is skipped; the prefetched ones
    // stay in the table so that their cache entries survive until the loop
    // opens them. Each file's reads are submitted at once: a reader may
    // already wait for them.
    for (uint64_t ino : inos) {
      Result<InodeRef> i = [&] {
        // Shared ns_mu_: no unlink can commit between this index read and
        // the table insert, which would leave a stale copy in the table.
        std::shared_lock<RwLock> ns(ns_mu_);
        return GetPinned(ino);  // pinned: not evicted before it is retained
      }();
      if (!i.ok()) continue;
      uint64_t started = 0;
      {
        std::lock_guard<std::mutex> l((*i)->mu);
        if (!(*i)->orphan) started = Prefetch(*i, &reqs, &entries);
      }
      if (started > 0) {
        RetainPrefetched(*i, &retained_readahead_, kRetainedReadahead);
        sched_->Submit(io::Lane::kPrefetch, reqs);
        reqs.clear();
        PromoteWaitedFor(&entries);
      }
      Unpin(*i);  // evicts a guess loaded only for this and not retained
    }
    inos.clear();
  }
}

Status FileSystem::Impl::DropCache() {
  Status st = FlushAll();
  {
    std::lock_guard<std::mutex> l(prefetch_mu_);
    prefetch_queue_.clear();  // a cold cache is not refilled by old lookups
    prefetch_inos_.clear();   // nor by old readahead
    readahead_ = {};
  }
  cache_->Clear();
  return st;
}

Status FileSystem::Impl::PrefetchIno(uint64_t ino) {
  KVFS_ASSIGN_OR_RETURN(InodeRef i, GetInode(ino));
  if (!i->is_dir()) {
    std::lock_guard<std::mutex> l(i->mu);
    Prefetch(i);
    return Status::OK();
  }
  // A directory: each file in it, in name order, until the budget is used.
  std::vector<uint64_t> children;
  {
    std::lock_guard<RwLock> ns(ns_mu_);
    KVFS_RETURN_IF_ERROR(volume_.index().ListEntries(ino, "", [&](std::string_view, uint64_t c) {
      children.push_back(c);
      return true;
    }));
    auto lo = pending_entries_.lower_bound(std::make_pair(ino, std::string()));
    for (auto it = lo; it != pending_entries_.end() && it->first.first == ino; ++it) {
      if (it->second.child) children.push_back(it->second.child);
    }
  }
  for (uint64_t c : children) {
    if (cache_->unused_prefetch_bytes() >= options_.prefetch_budget_bytes) break;
    auto child = GetInode(c);
    if (!child.ok()) continue;
    std::lock_guard<std::mutex> l((*child)->mu);
    if ((*child)->is_reg()) Prefetch(*child);
  }
  return Status::OK();
}

Result<uint64_t> FileSystem::Impl::ResolvePath(std::string_view path) {
  uint64_t ino = kRootIno;
  std::lock_guard<RwLock> ns(ns_mu_);
  while (!path.empty()) {
    size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (part.empty() || part == ".") continue;
    if (part.size() > kMaxNameLen) return Status::Error(ENAMETOOLONG, std::string(part));
    if (part == "..") return Status::Error(EINVAL, "'..' in a hint path");
    KVFS_ASSIGN_OR_RETURN(ino, ResolveEntry(ino, part));
  }
  return ino;
}

StatsSnapshot FileSystem::Impl::Stats() {
  StatsSnapshot s;
  s.ops = metrics_.Snapshot();
  s.errors = metrics_.Errors();
  s.cache = cache_->counters();
  s.staging_bytes = pool_.region_bytes();
  s.staged_bytes = (pool_.slot_count() - pool_.free_slots()) * pool_.slot_bytes();
  s.queued_commits = committer_->queued();
  s.name_cache_entries = entry_cache_.entries();
  s.name_cache_bytes = entry_cache_.bytes();
  s.zero_copy_bytes = metrics_.zero_copy_bytes();
  auto lanes = sched_->Snapshot();
  for (size_t k = 0; k < lanes.size(); ++k) {
    LaneStats l;
    l.name = io::LaneName(static_cast<io::Lane>(k));
    l.ops = lanes[k].ops;
    l.bytes = lanes[k].bytes;
    l.errors = lanes[k].errors;
    l.cancelled = lanes[k].cancelled;
    l.promoted = lanes[k].promoted;
    l.inflight = lanes[k].inflight;
    l.queued = lanes[k].queued;
    l.latency = lanes[k].latency;
    s.lanes.push_back(std::move(l));
  }
  volume::SpaceStats sp = volume_.space();
  s.total_bytes = sp.total_bytes;
  s.free_bytes = sp.free_bytes;
  s.largest_free = sp.largest_free;
  s.free_extents = sp.free_extents;
  return s;
}

Status FileSystem::Impl::Shutdown() {
  if (shut_down_) return Status::OK();
  Status st = FlushAll();
  Status synced = committer_->Drain(true);
  shut_down_ = true;
  if (!st.ok()) return st;
  return synced;
}

FsStats FileSystem::Impl::StatFs() {
  volume::SpaceStats s = volume_.space();
  FsStats f;
  f.block_size = kBlockSize;
  f.total_blocks = s.total_bytes / kBlockSize;
  f.free_blocks = s.free_bytes / kBlockSize;
  // Inodes are index records, limited only by space for data.
  f.files = f.total_blocks;
  f.free_files = f.free_blocks;
  f.name_max = kMaxNameLen;
  return f;
}

// ----------------------------------------------------------------- FileSystem

FileSystem::FileSystem(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FileSystem::~FileSystem() = default;

Result<std::unique_ptr<FileSystem>> FileSystem::Create(volume::Volume& volume,
                                                       const FileSystemOptions& options) {
  if (volume.read_only()) return Status::Error(EROFS, "FileSystem needs a read-write volume");
  KVFS_RETURN_IF_ERROR(Impl::LaneOptions(volume, options).Validate());
  // The cache's memory is registered with the io engine a piece at a time,
  // in the background (cache_registrar.h). Declared first, the arena goes
  // last if this fails: after the registrar has stopped and unregistered.
  std::unique_ptr<BuddyArena> arena;
  auto registrar = std::make_unique<CacheRegistrar>(volume);
  KVFS_ASSIGN_OR_RETURN(
      arena,
      BuddyArena::Create(options.cache_bytes, [r = registrar.get()](const char* base, size_t len) {
        r->Enqueue(base, len);
      }));
  auto impl = std::make_unique<Impl>(volume, options, std::move(registrar), std::move(arena));
  KVFS_ASSIGN_OR_RETURN(InodeRef root, impl->GetInode(kRootIno));
  {
    std::lock_guard<std::mutex> l(impl->table_mu_);
    root->lookups = 1;  // the kernel's reference, never forgotten
  }
  return std::unique_ptr<FileSystem>(new FileSystem(std::move(impl)));
}

Status FileSystem::Shutdown() { return impl_->Shutdown(); }
Result<Attr> FileSystem::Lookup(uint64_t p, std::string_view n) { return impl_->Lookup(p, n); }
void FileSystem::Forget(uint64_t ino, uint64_t n) { impl_->Forget(ino, n); }
Result<Attr> FileSystem::GetAttr(uint64_t ino) {
  return Measured(impl_->metrics_, Op::kGetattr, [&] { return impl_->GetAttr(ino); });
}
Result<Attr> FileSystem::SetAttr(uint64_t ino, const SetAttrRequest& req, uint64_t) {
  KVFS_RETURN_IF_ERROR(impl_->Writable());
  return impl_->SetAttr(ino, req);
}
Result<Attr> FileSystem::MkDir(uint64_t p, std::string_view n, uint32_t mode, const Caller& c) {
  KVFS_RETURN_IF_ERROR(impl_->Writable());
  return impl_->MkDir(p, n, mode, c);
}
Status FileSystem::RmDir(uint64_t p, std::string_view n) {
  KVFS_RETURN_IF_ERROR(impl_->Writable());
  return impl_->RmDir(p, n);
}
Status FileSystem::Unlink(uint64_t p, std::string_view n) {
  return Measured(impl_->metrics_, Op::kUnlink, [&] {
    KVFS_RETURN_IF_ERROR(impl_->Writable());
    return impl_->Unlink(p, n);
  });
}
Status FileSystem::Rename(uint64_t p, std::string_view n, uint64_t np, std::string_view nn,
                          unsigned flags) {
  return Measured(impl_->metrics_, Op::kRename, [&] {
    KVFS_RETURN_IF_ERROR(impl_->Writable());
    return impl_->Rename(p, n, np, nn, flags);
  });
}
Result<FileSystem::Created> FileSystem::Create(uint64_t p, std::string_view n, uint32_t mode,
                                               int flags, const Caller& c) {
  return Measured(impl_->metrics_, Op::kCreate, [&]() -> Result<Created> {
    KVFS_RETURN_IF_ERROR(impl_->Writable());
    return impl_->Create(p, n, mode, flags, c);
  });
}
Result<uint64_t> FileSystem::Open(uint64_t ino, int flags) {
  // ESTALE (an open that raced a rename-over; the kernel looks again) is an
  // answer, not an error.
  return Measured(
      impl_->metrics_, Op::kOpen,
      [&]() -> Result<uint64_t> {
        if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) {
          KVFS_RETURN_IF_ERROR(impl_->Writable());
        }
        return impl_->Open(ino, flags);
      },
      ESTALE);
}
void FileSystem::Read(uint64_t fh, uint64_t off, size_t size, ReadDone done,
                      CancelFlag cancel) {
  impl_->Read(fh, off, size, std::move(done), std::move(cancel));
}
void FileSystem::CancelReads(const CancelFlag& cancel) { impl_->sched_->Cancel(cancel); }
Result<size_t> FileSystem::Write(uint64_t fh, uint64_t off, std::span<const char> data) {
  KVFS_RETURN_IF_ERROR(impl_->Writable());
  return impl_->Write(fh, off, data);
}
bool FileSystem::WriteMayWait(uint64_t fh, uint64_t off, size_t len) {
  return impl_->WriteMayWait(fh, off, len);
}
Status FileSystem::Flush(uint64_t fh) { return impl_->Flush(fh); }
void FileSystem::Release(uint64_t fh) { impl_->Release(fh); }
void FileSystem::Fsync(uint64_t fh, bool, std::function<void(Status)> done) {
  impl_->Fsync(fh, std::move(done));
}
Status FileSystem::Fallocate(uint64_t fh, int mode, uint64_t off, uint64_t len) {
  KVFS_RETURN_IF_ERROR(impl_->Writable());
  return impl_->Fallocate(fh, mode, off, len);
}
Result<uint64_t> FileSystem::OpenDir(uint64_t ino) { return impl_->OpenDir(ino); }
Status FileSystem::ReadDir(
    uint64_t dh, uint64_t off,
    const std::function<bool(std::string_view, uint64_t, uint32_t, uint64_t)>& fn) {
  return impl_->ReadDir(dh, off, fn);
}
void FileSystem::ReleaseDir(uint64_t dh) { impl_->ReleaseDir(dh); }
FsStats FileSystem::StatFs() { return impl_->StatFs(); }
Status FileSystem::FlushAll() { return impl_->FlushAll(); }
Status FileSystem::Sync() {
  KVFS_RETURN_IF_ERROR(impl_->FlushAll());
  return impl_->committer_->Drain(/*sync=*/true);
}
Status FileSystem::Prefetch(uint64_t ino) { return impl_->PrefetchIno(ino); }
Result<uint64_t> FileSystem::ResolvePath(std::string_view path) { return impl_->ResolvePath(path); }
Status FileSystem::DropCache() { return impl_->DropCache(); }
CacheStats FileSystem::cache_stats() { return impl_->cache_->counters(); }
StatsSnapshot FileSystem::Stats() { return impl_->Stats(); }
Result<Attr> FileSystem::LookupPath(uint64_t dir, std::string_view path, const Caller& caller) {
  return impl_->LookupPath(dir, path, caller);
}
void FileSystem::ReadFile(uint64_t dir, std::string_view path, uint64_t off, std::span<char> dest,
                          const Caller& caller, std::function<void(Result<size_t>)> done) {
  impl_->ReadFile(dir, path, off, dest, caller, std::move(done));
}
void FileSystem::WriteFile(uint64_t dir, std::string_view path, std::span<const char> data,
                           const Caller& caller, std::function<void(Status)> done) {
  if (Status st = impl_->Writable(); !st.ok()) return done(std::move(st));
  impl_->WriteFile(dir, path, data, caller, std::move(done));
}
Status FileSystem::DeleteFile(uint64_t dir, std::string_view path, const Caller& caller) {
  KVFS_RETURN_IF_ERROR(impl_->Writable());
  return impl_->DeleteFile(dir, path, caller);
}
Status FileSystem::ExistsPath(uint64_t dir, std::string_view path, const Caller& caller) {
  int code = 0;
  impl_->ExistsPaths(dir, {&path, 1}, caller, {&code, 1});
  return code == 0 ? Status::OK() : Status::Error(code, "exists: " + std::string(path));
}
void FileSystem::ExistsPaths(uint64_t dir, std::span<const std::string_view> paths,
                             const Caller& caller, std::span<int> codes) {
  impl_->ExistsPaths(dir, paths, caller, codes);
}

Result<uint64_t> FileSystem::PrefetchFile(uint64_t dir, std::string_view path,
                                          const Caller& caller) {
  return impl_->PrefetchFile(dir, path, caller);
}

}  // namespace kvfs::fs
