// Loading file data into the RAM cache: whole-file prefetch (open, lookup,
// hints, readahead guesses), the cache entry that answers a read whole, and
// waiting for a load. The thread and queues that drive speculative loads
// are fs/prefetcher.h; which files a load loop opens next, fs/readahead.h.
#include <algorithm>
#include <cstring>

#include "common/format.h"
#include "fs/access.h"
#include "fs/chunk_cache.h"
#include "fs/file_memory.h"
#include "fs/countdown.h"
#include "fs/file_system_impl.h"

namespace kvfs::fs {

void FileSystem::Impl::WhenLoaded(const std::shared_ptr<CachedChunk>& c,
                                  std::function<void(bool ok)> fn) {
  // Its requests carry the entry as their group (Prefetch).
  if (c->WaitIfLoading(fn)) {  // a copy: `fn` runs here if it is not loading
    sched_->Promote(c.get());
  } else {
    fn(c->state() == CachedChunk::State::kReady);
  }
}

std::shared_ptr<CachedChunk> FileSystem::Impl::CachedWhole(const InodeRef& i, uint64_t off,
                                                           uint64_t len) {
  const uint64_t ci = off / kChunkBytes;
  if ((off + len - 1) / kChunkBytes != ci || verifier_.enabled()) return nullptr;
  std::optional<InstalledChunk> chunk = i->data.Installed(ci);
  if (!chunk) return nullptr;
  // A miss is counted by the PlanRead that follows.
  std::shared_ptr<CachedChunk> c = ram_->chunks().Get(i->token, ci, chunk->seq, false);
  if (!c || c->state() == CachedChunk::State::kFailed) return nullptr;
  if (off + len > ci * kChunkBytes + c->capacity) return nullptr;  // ends in a hole
  return c;
}

std::shared_ptr<CachedChunk> FileSystem::Impl::StartChunkLoad(
    const InodeRef& i, uint64_t ci, uint64_t seq, const std::vector<index::FileExtent>& extents,
    bool prefetch) {
  const uint64_t cstart = ci * kChunkBytes;
  // The chunk's bytes each extent holds, in order; the entry ends where the
  // last one does.
  std::vector<std::pair<uint64_t, uint64_t>> covered;
  uint64_t capacity = 0;
  for (const auto& fe : extents) {
    covered.push_back({fe.file_off - cstart, fe.file_off - cstart + fe.ext.len});
    capacity = std::max(capacity, covered.back().second);
  }
  auto entry = ram_->chunks().StartLoad(i->token, ci, seq, capacity, prefetch);
  if (!entry) return nullptr;
  // Cache memory is reused, not fresh: what no extent covers (a hole) must
  // read as zeros.
  std::sort(covered.begin(), covered.end());
  uint64_t pos = 0;
  for (const auto& [a, b] : covered) {
    if (a > pos) std::memset(entry->data.get() + pos, 0, a - pos);
    pos = std::max(pos, b);
  }
  return entry;
}

void FileSystem::Impl::PromoteWaitedFor(std::vector<std::shared_ptr<CachedChunk>>* entries) {
  // A reader registers its wait and then promotes; this runs after the
  // submission: one of the two finds the other's work done.
  for (const auto& e : *entries) {
    if (e->has_waiters()) sched_->Promote(e.get());
  }
  entries->clear();
}

// ------------------------------------------------------------ file memory

std::shared_ptr<FileMemory> FileSystem::Impl::CurrentMemory(const InodeRef& i) {
  if (!ram_->memory()) return nullptr;
  if (std::shared_ptr<FileMemory> s = i->data.served()) return s;  // the file's authority
  std::shared_ptr<FileMemory> m = ram_->memory()->Get(i->token);
  if (!m) return nullptr;
  return i->data.AtVersion(m->version(), i->rec.size) ? m : nullptr;
}

std::shared_ptr<FileMemory> FileSystem::Impl::HeldMemory(const InodeRef& i) {
  std::shared_ptr<FileMemory> m = CurrentMemory(i);
  if (!m || m->state() == FileMemory::State::kFailed) return nullptr;
  return m;
}

bool FileSystem::Impl::MemoryIsCurrent(const InodeRef& i, const FileMemory& m) {
  return m.state() == FileMemory::State::kReady && i->data.AtVersion(m.version(), i->rec.size);
}

bool FileSystem::Impl::MemoryEligible(const InodeRef& i) {
  return ram_->memory() && i->is_reg() && !i->deleted && i->rec.size >= kMinFileMemoryBytes &&
         i->rec.size <= options_.prefetch_file_max_bytes && !verifier_.enabled() &&
         i->data.HasVersion();
}

std::function<void(Status)> FileSystem::Impl::LoadCompletion(const InodeRef& i, size_t reads,
                                                            uint64_t bytes,
                                                            std::function<void(bool ok)> finish) {
  struct Load {
    Countdown reads;
    InodePin pin;
    std::chrono::steady_clock::time_point start;
    uint64_t bytes = 0;
    std::function<void(bool)> finish;
  };
  auto load = std::make_shared<Load>();
  load->reads.Reset(reads);
  load->pin = table_.Pin(i);  // until the load completes
  load->start = std::chrono::steady_clock::now();
  load->bytes = bytes;
  load->finish = std::move(finish);
  i->data.BeginRead();  // its extents stay allocated until it ends
  return [this, load](Status st) {
    if (!load->reads.Finish(st)) return;
    const bool ok = load->reads.first().ok();
    metrics_.Record(Op::kPrefetch, ElapsedNs(load->start), load->bytes);
    if (!ok) metrics_.Error(EIO);
    load->finish(ok);
    FinishDeviceRead(std::move(load->pin));
  };
}

std::shared_ptr<FileMemory> FileSystem::Impl::StartMemoryLoad(
    const InodeRef& i, bool prefetch, std::vector<device::IoRequest>* reqs) {
  std::optional<MemoryVersion> v = i->data.Version(i->rec.size);
  if (!v) return nullptr;
  Result<std::shared_ptr<FileMemory>> made =
      ram_->memory()->Make(*v, i->data.MemoryBytes(v->size), prefetch);
  if (!made.ok()) return nullptr;
  std::shared_ptr<FileMemory> m = std::move(*made);
  if (!ram_->memory()->Insert(i->token, m, prefetch)) return nullptr;
  const size_t n = i->data.LoadReads();
  if (n == 0) {  // in memory already, or holes: zeros
    i->data.LoadInto(m, v->size, nullptr, reqs);
    m->Finish(true);
    return m;
  }
  // A failed load stays as the version's entry (its pages given back):
  // reads of the file then go through the chunk cache. Each read holds the
  // memory it reads into until it completes.
  i->data.LoadInto(m, v->size,
                   LoadCompletion(i, n, v->size, [m](bool ok) { m->Finish(ok); }), reqs);
  return m;
}

void FileSystem::Impl::WhenMemoryLoaded(const std::shared_ptr<FileMemory>& m,
                                        std::function<void(bool ok)> fn) {
  if (m->WaitIfLoading(fn)) {  // a copy: `fn` runs here if it is not loading
    sched_->Promote(m.get());
  } else {
    fn(m->state() == FileMemory::State::kReady);
  }
}

// ------------------------------------------------------------ prefetch

uint64_t FileSystem::Impl::PrefetchLocked(const InodeRef& inode, std::vector<device::IoRequest>* batch,
                                          std::vector<std::shared_ptr<CachedChunk>>* entries) {
  if (!inode->is_reg() || inode->deleted) return 0;
  if (inode->rec.size > options_.prefetch_file_max_bytes) return 0;
  if (MemoryEligible(inode)) {
    // Loaded or loading already; or its load failed: the chunk cache,
    // whose reads fail only where the device does.
    std::shared_ptr<FileMemory> cur = CurrentMemory(inode);
    if (cur && cur->state() != FileMemory::State::kFailed) return 0;
    if (SpeculativeBytes() >= options_.prefetch_budget_bytes) return 0;
    std::vector<device::IoRequest> reqs;
    std::shared_ptr<FileMemory> m = cur ? nullptr : StartMemoryLoad(inode, true, &reqs);
    if (m) {
      if (reqs.empty()) return 0;
      // Submitted now, not with the caller's batch: making the next files'
      // memory takes a while, and an open may already wait for this one
      // (it is promoted to the read lane once its reads are queued).
      sched_->Submit(io::Lane::kPrefetch, reqs);
      if (m->has_waiters()) sched_->Promote(m.get());
      return m->version().size;
    }
    // No room in file memory (open files hold it): the chunk cache.
  }
  std::vector<device::IoRequest> reqs;
  const uint64_t bytes = LoadChunksLocked(inode, 0, UINT64_MAX, &reqs, entries);
  if (reqs.empty()) return bytes;
  if (batch != nullptr) {
    for (device::IoRequest& r : reqs) batch->push_back(std::move(r));
  } else {
    sched_->Submit(io::Lane::kPrefetch, reqs);
  }
  return bytes;
}

uint64_t FileSystem::Impl::LoadChunksLocked(const InodeRef& inode, uint64_t first, uint64_t end,
                                            std::vector<device::IoRequest>* reqs,
                                            std::vector<std::shared_ptr<CachedChunk>>* entries) {
  uint64_t bytes = 0;
  for (const InstalledChunk& chunk : inode->data.InstalledChunks(first, end)) {
    if (SpeculativeBytes() >= options_.prefetch_budget_bytes) break;
    const uint64_t cstart = chunk.ci * kChunkBytes;
    auto entry = StartChunkLoad(inode, chunk.ci, chunk.seq, chunk.extents, true);
    if (!entry) continue;  // cached already, or no room
    bytes += entry->capacity;
    if (entries != nullptr) entries->push_back(entry);
    // One chunk's load: its extents' reads (each checked with verify=on),
    // then the entry is finished.
    std::function<void(Status)> done = LoadCompletion(
        inode, chunk.extents.size(), entry->capacity, [entry](bool ok) { entry->Finish(ok); });
    for (const auto& fe : chunk.extents) {
      // Each read holds the entry it reads into until it completes.
      char* buf = entry->data.get() + (fe.file_off - cstart);
      reqs->push_back(FileData::ReadInto(
          entry, buf, fe.ext.device, fe.ext.byte_off, fe.ext.len,
          [this, done, fe, buf, ino = inode->ino](Status st) {
            if (st.ok() && verifier_.enabled()) st = verifier_.Check(ino, fe, buf);
            done(st);
          },
          entry.get()));
    }
  }
  return bytes;
}

void FileSystem::Impl::ReadAheadLocked(const InodeRef& i, uint64_t off, uint64_t len,
                                       std::vector<device::IoRequest>* reqs,
                                       std::vector<std::shared_ptr<CachedChunk>>* entries) {
  // Files up to prefetch_file_max_bytes are loaded whole when looked up or
  // opened; a larger one is read by a reader that moves through it (a
  // whole-sequence object: a header, then the rest in one read(2), which
  // the kernel sends as READs of max_read one after another). Each read
  // that continues the last one keeps the next kReadAheadBytes of chunks
  // loading into the cache, so the device works at queue depth ahead of
  // the reader instead of once per READ.
  if (options_.prefetch == PrefetchMode::kOff || i->rec.size <= options_.prefetch_file_max_bytes) {
    return;
  }
  const std::optional<std::pair<uint64_t, uint64_t>> ahead =
      i->data.NextReadAhead(off, len, i->rec.size, kReadAheadBytes);
  if (!ahead) return;
  if (SpeculativeBytes() >= options_.prefetch_budget_bytes) return;
  const auto [from, to] = *ahead;
  LoadChunksLocked(i, from / kChunkBytes, (to + kChunkBytes - 1) / kChunkBytes, reqs, entries);
  i->data.ReadAheadTo(AlignUp(to, kChunkBytes));
}

void FileSystem::Impl::PrefetchQueued(const std::vector<InodeRef>& looked_up,
                                      const std::vector<uint64_t>& guesses) {
  std::vector<device::IoRequest> reqs;
  std::vector<std::shared_ptr<CachedChunk>> entries;
  for (const InodeRef& inode : looked_up) {
    // Unloaded since it was queued (the kernel forgot it): its cache
    // entries would belong to nobody. Pinned while its reads are set up
    // (they pin it themselves until they end).
    InodePin pin = table_.PinIfCurrent(inode);
    if (!pin) continue;
    MutexLock l(inode->mu());
    PrefetchLocked(inode, &reqs, &entries);
  }
  if (!reqs.empty()) sched_->Submit(io::Lane::kPrefetch, reqs);
  reqs.clear();
  PromoteWaitedFor(&entries);
  // Readahead guesses: an inode that is gone, a directory, a file being
  // deleted or an unlinked one still open is skipped; the prefetched ones
  // stay in the table so that their cache entries survive until the loop
  // opens them. Each file's reads are submitted at once: a reader may
  // already wait for them.
  for (uint64_t ino : guesses) {
    Result<InodePin> i = [&] {
      // Shared ns_.mu(): no unlink can commit between this index read and
      // the table insert, which would leave a stale copy in the table.
      NamespaceReadLock ns(ns_.mu());
      return table_.GetPinned(ino);  // pinned: not unloaded before it is retained
    }();
    if (!i.ok()) continue;
    const InodeRef& inode = i->ref();
    uint64_t started = 0;
    {
      MutexLock l(inode->mu());
      if (!inode->orphan) started = PrefetchLocked(inode, &reqs, &entries);
    }
    if (started > 0) {
      retained_.RetainGuess(table_.Pin(inode));
      sched_->Submit(io::Lane::kPrefetch, reqs);
      reqs.clear();
      PromoteWaitedFor(&entries);
    }
    // The pin goes here: unloads a guess loaded only for this and not retained.
  }
}

Status FileSystem::Impl::PrefetchIno(uint64_t ino, const Caller* check) {
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  {
    MutexLock l(i->mu());
    if (check != nullptr) {
      KVFS_RETURN_IF_ERROR(
          CheckUserXattr(i->rec.mode, i->rec.uid, i->rec.gid, /*write=*/true, *check));
    }
    if (!i->is_dir()) {
      PrefetchLocked(i);
      return Status::OK();
    }
  }
  // A directory: each file in it, in name order, until the budget is used.
  std::vector<uint64_t> children;
  {
    NamespaceReadLock ns(ns_.mu());  // reads only
    std::vector<Namespace::Entry> names;
    KVFS_RETURN_IF_ERROR(ns_.List(ino, &names));
    for (const Namespace::Entry& e : names) children.push_back(e.child);
  }
  for (uint64_t c : children) {
    if (SpeculativeBytes() >= options_.prefetch_budget_bytes) break;
    auto child = table_.Get(c);
    if (!child.ok()) continue;
    MutexLock l((*child)->mu());
    if ((*child)->is_reg()) PrefetchLocked(*child);
  }
  return Status::OK();
}

}  // namespace kvfs::fs
