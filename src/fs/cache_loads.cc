// Loading file data into the RAM cache: whole-file prefetch (open, lookup,
// hints, readahead guesses), the cache entry that answers a read whole, and
// waiting for a load. The thread and queues that drive speculative loads
// are fs/prefetcher.h; which files a load loop opens next, fs/readahead.h.
#include <algorithm>
#include <cstring>

#include "common/format.h"
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
  auto it = i->chunks.find(ci);
  if (it == i->chunks.end()) return nullptr;
  const ChunkState& cs = it->second;
  if (cs.staged || cs.inflight || cs.failed || cs.extents.empty()) return nullptr;
  // A miss is counted by the PlanRead that follows.
  std::shared_ptr<CachedChunk> c = ram_->chunks().Get(i->token, ci, cs.installed_seq, false);
  if (!c || c->state() == CachedChunk::State::kFailed) return nullptr;
  if (off + len > ci * kChunkBytes + c->capacity) return nullptr;  // ends in a hole
  return c;
}


std::shared_ptr<CachedChunk> FileSystem::Impl::StartChunkLoad(const InodeRef& i, uint64_t ci,
                                                              const ChunkState& cs, bool prefetch) {
  const uint64_t cstart = ci * kChunkBytes;
  // The chunk's bytes each extent holds, in order; the entry ends where the
  // last one does.
  std::vector<std::pair<uint64_t, uint64_t>> covered;
  uint64_t capacity = 0;
  for (const auto& fe : cs.extents) {
    covered.push_back({fe.file_off - cstart, fe.file_off - cstart + fe.ext.len});
    capacity = std::max(capacity, covered.back().second);
  }
  auto entry = ram_->chunks().StartLoad(i->token, ci, cs.installed_seq, capacity, prefetch);
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

namespace {

// Calls fn(chunk index, version) for each chunk of `i` in order; false (at
// the first such chunk) if one has no version to hold: staged bytes may
// still change, and a failed chunk has none. A version being written will
// not change (and is installed under its own number when its writes
// complete). REQUIRES: i.mu() held.
template <typename Fn>
bool EachChunkVersion(const InodeState& i, Fn&& fn) {
  for (const auto& [ci, cs] : i.chunks) {
    if (cs.staged || (cs.failed && !cs.inflight)) return false;
    fn(ci, cs.inflight ? cs.inflight->seq : cs.installed_seq);
  }
  return true;
}

// Whether `i` is now at version `v`, with no copy made (asked per read).
bool IsAtVersion(const InodeState& i, const MemoryVersion& v) {
  if (i.rec.size != v.size || i.chunks.size() != v.chunks.size()) return false;
  auto want = v.chunks.begin();
  bool same = true;
  return EachChunkVersion(i, [&](uint64_t ci, uint64_t seq) {
           same = same && want->first == ci && want->second == seq;
           ++want;
         }) &&
         same;
}

// Zeroes the bytes of [0, size) at `data` that no extent of `i` and no
// chunk being written covers (what StartMemoryLoad does not write).
// REQUIRES: i.mu() held.
void ClearUncovered(const InodeState& i, uint64_t size, char* data) {
  std::vector<std::pair<uint64_t, uint64_t>> covered;
  for (const auto& [ci, cs] : i.chunks) {
    const uint64_t cstart = ci * kChunkBytes;
    if (cs.inflight) {
      covered.push_back({cstart, cstart + kChunkBytes});
    } else {
      for (const auto& fe : cs.extents) covered.push_back({fe.file_off, fe.file_off + fe.ext.len});
    }
  }
  std::sort(covered.begin(), covered.end());
  uint64_t pos = 0;
  for (const auto& [a, b] : covered) {
    if (a >= size) break;
    if (a > pos) std::memset(data + pos, 0, a - pos);
    pos = std::max(pos, b);
  }
  if (pos < size) std::memset(data + pos, 0, size - pos);
}

}  // namespace

std::optional<MemoryVersion> FileSystem::Impl::CurrentMemoryVersion(const InodeState& i) {
  MemoryVersion v;
  v.size = i.rec.size;
  v.chunks.reserve(i.chunks.size());
  if (!EachChunkVersion(i, [&](uint64_t ci, uint64_t seq) { v.chunks.emplace_back(ci, seq); })) {
    return std::nullopt;
  }
  return v;
}

std::shared_ptr<FileMemory> FileSystem::Impl::CurrentMemory(const InodeRef& i) {
  if (!ram_->memory()) return nullptr;
  if (std::shared_ptr<FileMemory> s = i->data.served()) return s;  // the file's authority
  std::shared_ptr<FileMemory> m = ram_->memory()->Get(i->token);
  if (!m) return nullptr;
  return IsAtVersion(*i, m->version()) ? m : nullptr;
}

std::shared_ptr<FileMemory> FileSystem::Impl::HeldMemory(const InodeRef& i) {
  std::shared_ptr<FileMemory> m = CurrentMemory(i);
  if (!m || m->state() == FileMemory::State::kFailed) return nullptr;
  return m;
}

bool FileSystem::Impl::MemoryIsCurrent(const InodeRef& i, const FileMemory& m) {
  return m.state() == FileMemory::State::kReady && IsAtVersion(*i, m.version());
}

bool FileSystem::Impl::MemoryEligible(const InodeRef& i) {
  return ram_->memory() && i->is_reg() && !i->deleted && i->rec.size >= kMinFileMemoryBytes &&
         i->rec.size <= options_.prefetch_file_max_bytes && !verifier_.enabled() &&
         EachChunkVersion(*i, [](uint64_t, uint64_t) {});
}

std::shared_ptr<FileMemory> FileSystem::Impl::StartMemoryLoad(
    const InodeRef& i, bool prefetch, std::vector<device::IoRequest>* reqs) {
  std::optional<MemoryVersion> v = CurrentMemoryVersion(*i);
  if (!v) return nullptr;
  // Extents cover whole blocks, maybe past the size (a truncate within a
  // block): the mapping holds every byte a device read writes.
  uint64_t end = v->size;
  for (const auto& [ci, cs] : i->chunks) {
    for (const auto& fe : cs.extents) end = std::max(end, fe.file_off + fe.ext.len);
  }
  Result<std::shared_ptr<FileMemory>> made = ram_->memory()->Make(*v, AlignUp(end, kBlockSize), prefetch);
  if (!made.ok()) return nullptr;
  std::shared_ptr<FileMemory> m = std::move(*made);
  if (!ram_->memory()->Insert(i->token, m, prefetch)) return nullptr;
  // Kept memory holds a former file's bytes: what neither a device read
  // nor a copy below writes (holes) must read as zeros.
  if (!m->zeroed()) ClearUncovered(*i, v->size, m->data());
  struct Load {
    Countdown reads;
    std::shared_ptr<FileMemory> memory;
    InodePin pin;
  };
  // A version still being written is copied from its buffer (the device
  // may not have it yet); the rest is read from the device.
  size_t n = 0;
  for (const auto& [ci, cs] : i->chunks) {
    const uint64_t cstart = ci * kChunkBytes;
    if (cs.inflight) {
      if (cstart < v->size) {
        const uint64_t hi = std::min(kChunkBytes, v->size - cstart);
        cs.inflight->CopyOut(0, hi, m->data() + cstart);
      }
    } else {
      n += cs.extents.size();
    }
  }
  if (n == 0) {  // in memory already, or holes: the memfd's zeros
    m->Finish(true);
    return m;
  }
  auto load = std::make_shared<Load>();
  load->reads.Reset(n);
  load->memory = m;
  load->pin = table_.Pin(i);  // until the load completes
  i->data.BeginRead();
  const auto start = std::chrono::steady_clock::now();
  const uint64_t size = m->version().size;
  for (const auto& [ci, cs] : i->chunks) {
    if (cs.inflight) continue;
    for (const auto& fe : cs.extents) {
      // Each read holds the memory it reads into until it completes (a
      // reader that waits for the memory promotes it: its group).
      reqs->push_back(FileData::ReadInto(
          m, m->data() + fe.file_off, fe.ext.device, fe.ext.byte_off, fe.ext.len,
          [this, load, start, size](Status st) {
            if (!load->reads.Finish(st)) return;
            const bool ok = load->reads.first().ok();
            metrics_.Record(Op::kPrefetch, ElapsedNs(start), size);
            if (!ok) metrics_.Error(EIO);
            // A failed load stays as the version's entry (its pages given
            // back): reads of the file then go through the chunk cache.
            load->memory->Finish(ok);
            FinishDeviceRead(std::move(load->pin));
          },
          m.get()));
    }
  }
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
  // One chunk's load: its extents' reads, then the entry is finished and
  // the pin that kept the inode given back.
  struct Load {
    Countdown reads;
    std::shared_ptr<CachedChunk> entry;
    InodePin pin;
  };
  uint64_t bytes = 0;
  for (auto it = inode->chunks.lower_bound(first); it != inode->chunks.end() && it->first < end;
       ++it) {
    const uint64_t ci = it->first;
    const ChunkState& cs = it->second;
    if (cs.staged || cs.inflight || cs.extents.empty()) continue;
    if (SpeculativeBytes() >= options_.prefetch_budget_bytes) break;
    const uint64_t cstart = ci * kChunkBytes;
    auto entry = StartChunkLoad(inode, ci, cs, true);
    if (!entry) continue;  // cached already, or no room
    bytes += entry->capacity;
    if (entries != nullptr) entries->push_back(entry);
    auto load = std::make_shared<Load>();
    load->reads.Reset(cs.extents.size());
    load->entry = entry;
    load->pin = table_.Pin(inode);  // until the load completes
    inode->data.BeginRead();
    const auto start = std::chrono::steady_clock::now();
    for (const auto& fe : cs.extents) {
      // Each read holds the entry it reads into until it completes.
      char* buf = entry->data.get() + (fe.file_off - cstart);
      reqs->push_back(FileData::ReadInto(
          entry, buf, fe.ext.device, fe.ext.byte_off, fe.ext.len,
          [this, load, fe, buf, start](Status st) {
            if (st.ok() && verifier_.enabled()) st = verifier_.Check(load->pin->ino, fe, buf);
            if (!load->reads.Finish(st)) return;
            const bool ok = load->reads.first().ok();
            metrics_.Record(Op::kPrefetch, ElapsedNs(start), load->entry->capacity);
            if (!ok) metrics_.Error(EIO);
            load->entry->Finish(ok);
            FinishDeviceRead(std::move(load->pin));
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
  const bool sequential = off == i->read_end;
  i->read_end = off + len;
  if (!sequential) {
    i->read_ahead_to = 0;
    return;
  }
  const uint64_t to = std::min(i->rec.size, off + len + kReadAheadBytes);
  const uint64_t from = std::max(off + len, i->read_ahead_to);
  // Keep the window full, a chunk at a time, not a window at a time.
  if (from >= to) return;
  if (SpeculativeBytes() >= options_.prefetch_budget_bytes) return;
  LoadChunksLocked(i, from / kChunkBytes, (to + kChunkBytes - 1) / kChunkBytes, reqs, entries);
  i->read_ahead_to = AlignUp(to, kChunkBytes);
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

Status FileSystem::Impl::PrefetchIno(uint64_t ino) {
  KVFS_ASSIGN_OR_RETURN(InodeRef i, table_.Get(ino));
  if (!i->is_dir()) {
    MutexLock l(i->mu());
    PrefetchLocked(i);
    return Status::OK();
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
