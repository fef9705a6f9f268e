// FileSystem: the facade. Every public call passes through here, where the
// rules that hold per call (fs/calls.h) are applied in one place: the EROFS
// gate and the latency/error metrics. Also construction, shutdown, and the
// calls that span the whole filesystem (flush, stats, drop cache).
#include "fs/file_system.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <chrono>
#include <random>

#include "common/format.h"
#include "common/kill_point.h"
#include "fs/calls.h"
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

uint32_t FileSystem::Impl::RandomGeneration() {
  std::random_device rd;
  uint32_t g;
  do {
    g = rd();
  } while (g <= 1);
  return g;
}

FileSystem::Impl::Impl(volume::Volume& volume, const FileSystemOptions& options,
                       std::unique_ptr<RamCache> ram)
    : volume_(volume),
      sched_(std::make_unique<io::Scheduler>(volume.io(), LaneOptions(volume, options))),
      options_(options),
      ram_(std::move(ram)),
      table_([this](uint64_t ino) { return volume_.index().GetInode(ino); },
             [this](const InodeState& gone) { ram_->EraseOwner(gone.token); }) {
  committer_ = std::make_unique<Committer>(
      volume_.index(), [this](Change& c, index::WriteBatch& b) { BuildChange(c, b); },
      [this](Change& c, Status st) { ChangeCommitted(c, st); }, [this] { return FlushDevices(); },
      options_.commit_interval_ms);
  atime_ = std::make_unique<AtimeLog>(std::chrono::milliseconds(options_.atime_flush_ms),
                                      [this](std::vector<InodePin> pins) {
                                        FlushAtimes(std::move(pins));
                                      });
  prefetcher_ = std::make_unique<Prefetcher>(
      [this](const std::vector<InodeRef>& looked_up, const std::vector<uint64_t>& guesses) {
        PrefetchQueued(looked_up, guesses);
      });
  StartEviction();
}

FileSystem::Impl::~Impl() {
  Shutdown().ignore();  // errors were logged; nobody is left to tell
  eviction_.ResetEvictor();  // stopped by Shutdown(); before what its hooks use
  prefetcher_->Stop();  // before the scheduler it submits to goes
  sched_.reset();  // every request completes (their callbacks may queue changes)
  // No I/O into the cache is left: nothing registers any more, and what
  // was registered is unregistered.
  ram_->StopRegistering();
  atime_.reset();  // flushed by Shutdown(); its pins go before the table
  committer_.reset();
  retained_.Clear();
}

int64_t FileSystem::Impl::NowNs() const {
  if (options_.now_ns) return options_.now_ns();
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
  // The kernel requires the root's generation to be 0 (it warns "root
  // generation should be zero" at a LOOKUP of the root otherwise).
  a.generation = rec.ino == kRootIno ? 0 : rec.generation;
  return a;
}

Status FileSystem::Impl::FlushAll() {
  for (const InodeRef& i : table_.All()) {
    MutexLock l(i->mu());
    if (!i->is_reg()) continue;
    if (std::shared_ptr<Change> c = WriteOut(i)) {
      l.Unlock();
      Enqueue(c);
    }
  }
  return committer_->Drain(false);
}

Status FileSystem::Impl::DropCache() {
  Status st = FlushAll();
  prefetcher_->Clear();  // a cold cache is not refilled by old lookups or readahead
  ram_->Clear();  // files being served stay
  return st;
}

Result<uint64_t> FileSystem::Impl::ResolvePath(std::string_view path) {
  thread_local std::vector<std::string_view> parts;
  parts.clear();
  KVFS_RETURN_IF_ERROR(SplitPath(path, &parts));
  uint64_t ino = kRootIno;
  NamespaceReadLock ns(ns_.mu());  // a walk changes nothing ns_.mu() guards
  for (std::string_view part : parts) {
    KVFS_ASSIGN_OR_RETURN(ino, ns_.Resolve(ino, part));
  }
  return ino;
}

StatsSnapshot FileSystem::Impl::Stats() {
  StatsSnapshot s;
  s.ops = metrics_.Snapshot();
  s.errors = metrics_.Errors();
  s.cache = ram_->View();
  if (ram_->memory()) s.file_memory = ram_->memory()->counters();
  const device::BufferPool& pool = volume_.buffers();
  s.staging_bytes = pool.region_bytes();
  s.staged_bytes = (pool.slot_count() - pool.free_slots()) * pool.slot_bytes();
  s.queued_commits = committer_->queued();
  s.index_commits = committer_->commits();
  s.lookup_underflows = table_.lookup_underflows();
  s.atime_updates = atime_->updates();
  s.atime_flushes = atime_->flushes();
  s.name_cache_entries = ns_.cached_entries();
  s.name_cache_bytes = ns_.cached_bytes();
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
  auto devs = sched_->DeviceSnapshots();
  for (size_t d = 0; d < devs.size(); ++d) {
    DeviceIoStats v;
    v.path = d < volume_.devices().size() ? volume_.devices()[d]->path() : "";
    v.ops = devs[d].ops;
    v.bytes = devs[d].bytes;
    v.errors = devs[d].errors;
    v.inflight_commands = devs[d].inflight_commands;
    v.queued = devs[d].queued;
    v.latency = devs[d].latency;
    if (d < sp.devices.size()) {
      v.size_bytes = sp.devices[d].total_bytes;
      v.free_bytes = sp.devices[d].free_bytes;
      v.largest_free = sp.devices[d].largest_free;
    }
    s.devices.push_back(std::move(v));
  }
  s.total_bytes = sp.total_bytes;
  s.free_bytes = sp.free_bytes;
  s.largest_free = sp.largest_free;
  s.free_extents = sp.free_extents;
  if (const Evictor* evictor = eviction_.evictor()) {
    const EvictionCounters e = evictor->counters();
    s.evict_on = true;
    s.evict_high_pct = options_.eviction.high_pct;
    s.evict_low_pct = options_.eviction.low_pct;
    s.evict_min_age_ns = options_.eviction.min_age_ns;
    s.evict_scope_xattr = options_.eviction.scope == EvictScope::kXattr;
    s.evicted_files = e.files;
    s.evicted_bytes = e.bytes;
    s.evict_passes = e.passes;
    s.evict_passes_done = e.passes_done;
    s.evict_writer_waits = e.writer_waits;
    s.evict_writer_wait_ns = e.writer_wait_ns;
    s.evict_last_age_ns = e.last_age_ns;
  }
  return s;
}

Status FileSystem::Impl::Shutdown() {
  if (shut_down_) return Status::OK();
  eviction_.Stop();  // no unlink after the drain below
  atime_->Stop();
  atime_->Flush();  // every moved atime, in the synced drain below
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

namespace {

int CodeOf(const Status& st) { return st.code(); }
template <typename T>
int CodeOf(const Result<T>& r) {
  return r.ok() ? 0 : r.status().code();
}
uint64_t BytesOf(const Status&) { return 0; }
template <typename T>
uint64_t BytesOf(const Result<T>& r) {
  if constexpr (std::is_same_v<T, size_t>) return r.ok() ? *r : 0;
  return 0;
}

}  // namespace

// Records the end of a call started at `start` under its metric (fs/calls.h).
void FileSystem::Record(Call c, std::chrono::steady_clock::time_point start, int code,
                        uint64_t bytes) {
  const CallRules& rules = RulesOf(c);
  // A call refused for waiting runs again, and is measured then.
  if (!rules.metric || (code == kWouldWait && rules.wait == Wait::kAsk)) return;
  impl_->metrics_.Record(*rules.metric, ElapsedNs(start), bytes);
  if (code != 0 && code != rules.answer) impl_->metrics_.Error(code);
}

// Runs a synchronous call under the rules of `c`: refused with EROFS when
// it `changes` something after a failed commit, measured.
template <typename Fn>
auto FileSystem::Run(Call c, bool changes, Fn&& fn) -> decltype(fn()) {
  using R = decltype(fn());
  const auto start = std::chrono::steady_clock::now();
  R r = [&]() -> R {
    if (changes) KVFS_RETURN_IF_ERROR(impl_->Writable());
    return fn();
  }();
  Record(c, start, CodeOf(r), BytesOf(r));
  return r;
}

template <typename Fn>
auto FileSystem::Run(Call c, Fn&& fn) -> decltype(fn()) {
  return Run(c, RulesOf(c).changes, std::forward<Fn>(fn));
}

FileSystem::FileSystem(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FileSystem::~FileSystem() = default;

Result<std::unique_ptr<FileSystem>> FileSystem::Create(volume::Volume& volume,
                                                       const FileSystemOptions& options) {
  if (volume.read_only() && !options.read_only) {
    return Status::Error(EROFS, "FileSystem needs a read-write volume");
  }
  FileSystemOptions opts = options;
  if (opts.read_only) {
    opts.atime = AtimeMode::kNoatime;  // a read moves nothing
    opts.eviction.enabled = false;
  }
  KVFS_RETURN_IF_ERROR(Impl::LaneOptions(volume, opts).Validate());
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<RamCache> ram,
                        RamCache::Create(volume, opts.cache_bytes, opts.file_memory));
  auto impl = std::make_unique<Impl>(volume, opts, std::move(ram));
  // The kernel's reference to the root, never forgotten.
  KVFS_RETURN_IF_ERROR(impl->table_.GetLookedUp(kRootIno).status());
  return std::unique_ptr<FileSystem>(new FileSystem(std::move(impl)));
}

Status FileSystem::Shutdown() { return impl_->Shutdown(); }
Result<Attr> FileSystem::Lookup(uint64_t p, std::string_view n, const Caller* check,
                                bool* everyone_searches) {
  return Run(Call::kLookup, [&] { return impl_->Lookup(p, n, check, everyone_searches); });
}
void FileSystem::Forget(uint64_t ino, uint64_t n) { impl_->Forget(ino, n); }
Result<Attr> FileSystem::GetAttr(uint64_t ino) {
  return Run(Call::kGetAttr, [&] { return impl_->GetAttr(ino); });
}
Status FileSystem::Access(uint64_t ino, int want, const Caller* check, bool* everyone_searches) {
  return Run(Call::kAccess, [&] { return impl_->Access(ino, want, check, everyone_searches); });
}
Result<Attr> FileSystem::SetAttr(uint64_t ino, const SetAttrRequest& req, const Caller* check,
                                 bool* narrowed) {
  return Run(Call::kSetAttr, [&] { return impl_->SetAttr(ino, req, check, narrowed); });
}
Result<Attr> FileSystem::MkDir(uint64_t p, std::string_view n, uint32_t mode, const Caller& c,
                               const Caller* check, bool* everyone_searches) {
  return Run(Call::kMkDir, [&] { return impl_->MkDir(p, n, mode, c, check, everyone_searches); });
}
Status FileSystem::RmDir(uint64_t p, std::string_view n, const Caller* check) {
  return Run(Call::kRmDir, [&] { return impl_->RmDir(p, n, check); });
}
Status FileSystem::Unlink(uint64_t p, std::string_view n, const Caller* check) {
  return Run(Call::kUnlink, [&] { return impl_->Unlink(p, n, check); });
}
Status FileSystem::Rename(uint64_t p, std::string_view n, uint64_t np, std::string_view nn,
                          unsigned flags, const Caller* check, bool* drop_names) {
  return Run(Call::kRename,
             [&] { return impl_->Rename(p, n, np, nn, flags, check, drop_names); });
}
Result<FileSystem::Created> FileSystem::Create(uint64_t p, std::string_view n, uint32_t mode,
                                               int flags, const Caller& c, const Caller* check,
                                               bool* everyone_searches) {
  return Run(Call::kCreate,
             [&] { return impl_->Create(p, n, mode, flags, c, check, everyone_searches); });
}
Result<FileSystem::Created> FileSystem::CreateUnnamed(uint64_t p, uint32_t mode, int flags,
                                                      const Caller& c, const Caller* check,
                                                      bool* everyone_searches) {
  return Run(Call::kCreate,
             [&] { return impl_->CreateUnnamed(p, mode, flags, c, check, everyone_searches); });
}
Result<Attr> FileSystem::Link(uint64_t ino, uint64_t np, std::string_view nn, const Caller* check,
                              bool* everyone_searches) {
  return Run(Call::kLink, [&] { return impl_->Link(ino, np, nn, check, everyone_searches); });
}
Result<uint64_t> FileSystem::Open(uint64_t ino, int flags, KillPriv* kill,
                                  const Caller* check) {
  return Run(Call::kOpen, OpenChanges(flags),
             [&] { return impl_->Open(ino, flags, kill, check); });
}
void FileSystem::OpenServed(uint64_t ino, int flags, KillPriv* kill,
                            std::function<bool(FileMemory&)> can_serve,
                            std::function<void(Result<Opened>)> done, const Caller* check) {
  const auto start = std::chrono::steady_clock::now();
  auto measured = [this, start, done = std::move(done)](Result<Opened> r) {
    Record(Call::kOpen, start, r.ok() ? 0 : r.status().code(), 0);
    done(std::move(r));
  };
  if (OpenChanges(flags)) {
    if (Status w = impl_->Writable(); !w.ok()) return measured(w);
  }
  impl_->OpenServed(ino, flags, kill, check, std::move(can_serve), std::move(measured));
}
void FileSystem::Read(uint64_t fh, uint64_t off, size_t size, ReadDone done,
                      CancelFlag cancel) {
  const auto start = std::chrono::steady_clock::now();
  impl_->Read(
      fh, off, size,
      [this, start, done = std::move(done)](Status st, std::span<const char> d) {
        Record(Call::kRead, start, st.code(), d.size());
        done(st, d);
      },
      std::move(cancel));
}
void FileSystem::CancelReads(const CancelFlag& cancel) { impl_->sched_->Cancel(cancel); }
Result<size_t> FileSystem::Write(uint64_t fh, uint64_t off, std::span<const char> data,
                                 KillPriv* kill, bool may_wait) {
  return Run(Call::kWrite, [&] { return impl_->Write(fh, off, data, kill, may_wait); });
}
Status FileSystem::Flush(uint64_t fh, bool may_wait) {
  return Run(Call::kFlush, [&] { return impl_->Flush(fh, may_wait); });
}
bool FileSystem::Release(uint64_t fh, bool may_wait) { return impl_->Release(fh, may_wait); }
bool FileSystem::Fsync(uint64_t fh, bool, std::function<void(Status)> done, bool may_wait) {
  const auto start = std::chrono::steady_clock::now();
  return impl_->Fsync(
      fh,
      [this, start, done = std::move(done)](Status st) {
        Record(Call::kFsync, start, st.code(), 0);
        done(std::move(st));
      },
      may_wait);
}
Status FileSystem::Fallocate(uint64_t fh, int mode, uint64_t off, uint64_t len, KillPriv* kill) {
  return Run(Call::kFallocate, [&] { return impl_->Fallocate(fh, mode, off, len, kill); });
}
Status FileSystem::SetXattr(uint64_t ino, std::string_view name, std::string_view value,
                            int flags, const Caller& caller, const Caller* check) {
  return Run(Call::kSetXattr,
             [&] { return impl_->SetXattr(ino, name, value, flags, caller, check); });
}
Result<std::string> FileSystem::GetXattr(uint64_t ino, std::string_view name,
                                         const Caller& caller, const Caller* check) {
  return Run(Call::kGetXattr, [&] { return impl_->GetXattr(ino, name, caller, check); });
}
Result<std::string> FileSystem::ListXattr(uint64_t ino, const Caller& caller) {
  return Run(Call::kListXattr, [&] { return impl_->ListXattr(ino, caller); });
}
Status FileSystem::RemoveXattr(uint64_t ino, std::string_view name, const Caller& caller,
                               const Caller* check) {
  return Run(Call::kRemoveXattr, [&] { return impl_->RemoveXattr(ino, name, caller, check); });
}
Result<uint64_t> FileSystem::OpenDir(uint64_t ino, int flags, const Caller* check) {
  return Run(Call::kOpenDir, [&] { return impl_->OpenDir(ino, flags, check); });
}
Status FileSystem::ReadDir(
    uint64_t dh, uint64_t off,
    const std::function<bool(std::string_view, uint64_t, uint32_t, uint64_t)>& fn) {
  return impl_->ReadDir(dh, off, fn);
}
void FileSystem::ReleaseDir(uint64_t dh) { impl_->ReleaseDir(dh); }
FsStats FileSystem::StatFs() { return impl_->StatFs(); }
Status FileSystem::FlushAll() { return impl_->FlushAll(); }
Status FileSystem::Sync() {
  KVFS_KILL_POINT("FileSystem::Sync");  // asked, nothing forced yet
  KVFS_RETURN_IF_ERROR(impl_->FlushAll());
  return impl_->committer_->Drain(/*sync=*/true);
}
Status FileSystem::Prefetch(uint64_t ino, const Caller* check) {
  return impl_->PrefetchIno(ino, check);
}
Result<uint64_t> FileSystem::ResolvePath(std::string_view path) { return impl_->ResolvePath(path); }
Status FileSystem::DropCache() { return impl_->DropCache(); }
CacheStats FileSystem::cache_stats() { return impl_->ram_->View(); }

StatsSnapshot FileSystem::Stats() { return impl_->Stats(); }
void FileSystem::SetEvictionListener(
    std::function<void(uint64_t, std::string_view, uint64_t)> fn) {
  impl_->SetEvictionListener(std::move(fn));
}
Result<uint64_t> FileSystem::Evict(unsigned to_percent) {
  if (!impl_->eviction_.evictor()) return Status::Error(EINVAL, "eviction is off (mount with -o evict=lru)");
  if (to_percent > 100) return Status::Error(EINVAL, "evict: percent over 100");
  KVFS_RETURN_IF_ERROR(impl_->Writable());
  return impl_->eviction_.evictor()->RunPass(to_percent);
}
Result<Attr> FileSystem::LookupPath(uint64_t dir, std::string_view path, const Caller& caller) {
  return Run(Call::kLookupPath, [&] { return impl_->LookupPath(dir, path, caller); });
}
void FileSystem::ReadFile(uint64_t dir, std::string_view path, uint64_t off, std::span<char> dest,
                          const Caller& caller, std::function<void(Result<size_t>)> done) {
  const auto start = std::chrono::steady_clock::now();
  impl_->ReadFile(dir, path, off, dest, caller,
                  [this, start, done = std::move(done)](Result<size_t> r) {
                    Record(Call::kReadFile, start, CodeOf(r), BytesOf(r));
                    done(std::move(r));
                  });
}
void FileSystem::WriteFile(uint64_t dir, std::string_view path, std::span<const char> data,
                           const Caller& caller, std::function<void(Status)> done) {
  const auto start = std::chrono::steady_clock::now();
  auto measured = [this, start, size = data.size(), done = std::move(done)](Status st) {
    Record(Call::kWriteFile, start, st.code(), st.ok() ? size : 0);
    done(std::move(st));
  };
  if (Status st = impl_->Writable(); !st.ok()) return measured(std::move(st));
  impl_->WriteFile(dir, path, data, caller, std::move(measured));
}
Status FileSystem::DeleteFile(uint64_t dir, std::string_view path, const Caller& caller) {
  return Run(Call::kDeleteFile, [&] { return impl_->DeleteFile(dir, path, caller); });
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
void FileSystem::WaitPrefetchIdle() { impl_->prefetcher_->WaitIdle(); }
void FileSystem::WaitCommitsStalled() { impl_->committer_->WaitStalled(); }

void FileSystem::WaitEvictorIdle() {
  if (Evictor* evictor = impl_->eviction_.evictor()) evictor->WaitIdle();
}

void FileSystem::WaitAtimesFlushed() { impl_->atime_->WaitFlushed(); }
Result<uint64_t> FileSystem::PrefetchFile(uint64_t dir, std::string_view path,
                                          const Caller& caller) {
  return Run(Call::kPrefetchFile, [&] { return impl_->PrefetchFile(dir, path, caller); });
}

}  // namespace kvfs::fs
