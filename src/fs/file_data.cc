#include "fs/file_data.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/crc32c.h"
#include "common/format.h"
#include "fs/committer.h"
#include "fs/file_memory.h"

namespace kvfs::fs {

namespace {

// Bytes of the chunk starting at `cstart` that lie inside a file of `size`.
uint64_t ChunkValid(uint64_t size, uint64_t cstart) {
  return size > cstart ? std::min(kChunkBytes, size - cstart) : 0;
}

// Whether staging a chunk for a write of [lo, hi) (chunk offsets) must first
// read the version on the device: a partial overwrite of installed data.
bool ReadsBeforeWrite(const ChunkState& cs, uint64_t chunk_valid, uint64_t lo, uint64_t hi) {
  return !cs.inflight && !cs.extents.empty() && !(lo == 0 && hi >= chunk_valid);
}

uint64_t TotalLen(const std::vector<Extent>& v) {
  uint64_t n = 0;
  for (const auto& e : v) n += e.len;
  return n;
}

// Appends the extents `alloc` (written, with checksums `crcs`) to chunk
// `ci`'s installed extents, laid out from the chunk's start.
void InstallExtents(ChunkState& cs, uint64_t ci, const std::vector<Extent>& alloc,
                    const std::vector<uint32_t>& crcs) {
  uint64_t pos = 0;
  for (size_t e = 0; e < alloc.size(); ++e) {
    index::FileExtent fe;
    fe.file_off = ci * kChunkBytes + pos;
    fe.ext = alloc[e];
    fe.crc32c = crcs[e];
    cs.extents.push_back(fe);
    pos += alloc[e].len;
  }
}

// Calls fn(chunk index, version) for each chunk in order; false (at the
// first such chunk) if one has no version to hold: staged bytes may still
// change, and a failed chunk has none. A version being written will not
// change (and is installed under its own number when its writes complete).
template <typename Fn>
bool EachChunkVersion(const std::map<uint64_t, ChunkState>& chunks, Fn&& fn) {
  for (const auto& [ci, cs] : chunks) {
    if (cs.staged || (cs.failed && !cs.inflight)) return false;
    fn(ci, cs.inflight ? cs.inflight->seq : cs.installed_seq);
  }
  return true;
}

}  // namespace

FileData::~FileData() = default;

// ------------------------------------------------------------------ chunks

bool FileData::Load(const std::vector<index::FileExtent>& extents, uint64_t size) {
  std::map<uint64_t, ChunkState> chunks;
  for (const index::FileExtent& fe : extents) {
    const uint64_t ci = fe.file_off / kChunkBytes;
    if (fe.file_off + fe.ext.len > (ci + 1) * kChunkBytes) return false;
    ChunkState& cs = chunks[ci];
    cs.extents.push_back(fe);
    cs.installed_valid = ChunkValid(size, ci * kChunkBytes);
    cs.gen = ++gen_;
  }
  chunks_ = std::move(chunks);
  return true;
}

void FileData::Install(uint64_t ci, const std::vector<Extent>& alloc,
                       const std::vector<uint32_t>& crcs, uint64_t valid) {
  ChunkState& cs = chunks_[ci];
  InstallExtents(cs, ci, alloc, crcs);
  cs.installed_seq = ++chunk_seq_;
  cs.installed_valid = valid;
  cs.gen = ++gen_;
}

bool FileData::HasVersion() const {
  return EachChunkVersion(chunks_, [](uint64_t, uint64_t) {});
}

std::optional<MemoryVersion> FileData::Version(uint64_t size) const {
  MemoryVersion v;
  v.size = size;
  v.chunks.reserve(chunks_.size());
  if (!EachChunkVersion(chunks_, [&](uint64_t ci, uint64_t seq) { v.chunks.emplace_back(ci, seq); })) {
    return std::nullopt;
  }
  return v;
}

bool FileData::AtVersion(const MemoryVersion& v, uint64_t size) const {
  if (size != v.size || chunks_.size() != v.chunks.size()) return false;
  auto want = v.chunks.begin();
  bool same = true;
  return EachChunkVersion(chunks_,
                          [&](uint64_t ci, uint64_t seq) {
                            same = same && want->first == ci && want->second == seq;
                            ++want;
                          }) &&
         same;
}

uint64_t FileData::MemoryBytes(uint64_t size) const {
  uint64_t end = size;
  for (const auto& [ci, cs] : chunks_) {
    for (const auto& fe : cs.extents) end = std::max(end, fe.file_off + fe.ext.len);
  }
  return AlignUp(end, kBlockSize);
}

size_t FileData::LoadReads() const {
  size_t n = 0;
  for (const auto& [ci, cs] : chunks_) {
    if (!cs.inflight) n += cs.extents.size();
  }
  return n;
}

void FileData::LoadInto(const std::shared_ptr<FileMemory>& m, uint64_t size,
                        const std::function<void(Status)>& done,
                        std::vector<device::IoRequest>* reqs) {
  char* const data = m->data();
  if (!m->zeroed()) {
    // Kept memory holds a former file's bytes: what neither a device read
    // nor a copy below writes (holes) must read as zeros.
    std::vector<std::pair<uint64_t, uint64_t>> covered;
    for (const auto& [ci, cs] : chunks_) {
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
  // A version still being written is copied from its buffer (the device
  // may not have it yet); the rest is read from the device.
  for (const auto& [ci, cs] : chunks_) {
    const uint64_t cstart = ci * kChunkBytes;
    if (cs.inflight) {
      if (cstart < size) cs.inflight->CopyOut(0, std::min(kChunkBytes, size - cstart), data + cstart);
      continue;
    }
    for (const auto& fe : cs.extents) {
      reqs->push_back(ReadInto(m, data + fe.file_off, fe.ext.device, fe.ext.byte_off, fe.ext.len,
                               done, m.get()));
    }
  }
}

std::vector<InstalledChunk> FileData::InstalledChunks(uint64_t first, uint64_t end) const {
  std::vector<InstalledChunk> out;
  for (auto it = chunks_.lower_bound(first); it != chunks_.end() && it->first < end; ++it) {
    const ChunkState& cs = it->second;
    if (cs.staged || cs.inflight || cs.extents.empty()) continue;
    out.push_back({it->first, cs.installed_seq, cs.extents});
  }
  return out;
}

std::optional<InstalledChunk> FileData::Installed(uint64_t ci) const {
  auto it = chunks_.find(ci);
  if (it == chunks_.end()) return std::nullopt;
  const ChunkState& cs = it->second;
  if (cs.staged || cs.inflight || cs.failed || cs.extents.empty()) return std::nullopt;
  return InstalledChunk{ci, cs.installed_seq, cs.extents};
}

Status FileData::PlanRead(uint64_t off, uint64_t len, char* dst,
                          const ReadInstalled& device) const {
  const uint64_t end = off + len;
  // Lost bytes first: nothing is planned (or copied) for a read that fails.
  for (auto it = chunks_.lower_bound(off / kChunkBytes);
       it != chunks_.end() && it->first * kChunkBytes < end; ++it) {
    const ChunkState& cs = it->second;
    if (!cs.staged && !cs.inflight && cs.failed) {
      // Never hand out bytes that did not reach the device.
      return Status::Error(EIO, "data at offset " + std::to_string(it->first * kChunkBytes) +
                                    " was lost by a failed write");
    }
  }
  for (uint64_t pos = off; pos < end;) {
    const uint64_t ci = pos / kChunkBytes;
    const uint64_t cstart = ci * kChunkBytes;
    const uint64_t hi = std::min(end, cstart + kChunkBytes);
    auto it = chunks_.find(ci);
    const ChunkBuf* mem = nullptr;
    if (it != chunks_.end()) {
      mem = it->second.staged ? it->second.staged.get() : it->second.inflight.get();
    }
    if (mem) {
      mem->CopyOut(pos - cstart, hi - cstart, dst + (pos - off));  // written, not on the device
    } else if (it == chunks_.end() || it->second.extents.empty()) {
      std::memset(dst + (pos - off), 0, hi - pos);  // a hole reads as zeros
    } else {
      device(pos, hi, ci, it->second.installed_seq, it->second.extents);
    }
    pos = hi;
  }
  return Status::OK();
}

std::optional<std::pair<uint64_t, uint64_t>> FileData::NextReadAhead(uint64_t off, uint64_t len,
                                                                      uint64_t size,
                                                                      uint64_t window) {
  const bool sequential = off == read_end_;
  read_end_ = off + len;
  if (!sequential) {
    read_ahead_to_ = 0;
    return std::nullopt;
  }
  const uint64_t to = std::min(size, off + len + window);
  const uint64_t from = std::max(off + len, read_ahead_to_);
  // Keep the window full, a chunk at a time, not a window at a time.
  if (from >= to) return std::nullopt;
  return std::make_pair(from, to);
}

// ------------------------------------------------------------ write-behind

bool FileData::Staged(uint64_t ci) const {
  auto it = chunks_.find(ci);
  return it != chunks_.end() && it->second.staged;
}

std::vector<uint64_t> FileData::StagedChunks() const {
  std::vector<uint64_t> out;
  for (const auto& [ci, cs] : chunks_) {
    if (cs.staged) out.push_back(ci);
  }
  return out;
}

FileData::Staging FileData::Stage(uint64_t ci, const std::shared_ptr<ChunkBuf>& cb,
                                  uint64_t size, uint64_t lo, uint64_t hi, InstalledChunk* old) {
  ChunkState& cs = chunks_[ci];
  if (cs.staged) return Staging::kStagedMeanwhile;
  const uint64_t chunk_valid = ChunkValid(size, ci * kChunkBytes);
  char* data = cb->buf.data();
  cb->clean = 0;
  if (cs.inflight) {
    std::memcpy(data, cs.inflight->buf.data(), cs.inflight->valid);
    cb->clean = cs.inflight->valid;
    cb->valid = std::max(cs.inflight->valid, chunk_valid);
  } else if (ReadsBeforeWrite(cs, chunk_valid, lo, hi)) {
    // Partial overwrite of data on the device: read it first (rare for KV
    // workloads, which write whole files).
    *old = InstalledChunk{ci, cs.installed_seq, cs.extents};
    std::memset(data, 0, kChunkBytes);  // holes between the extents read as zeros
    cb->clean = kChunkBytes;
    if (cs.empty()) chunks_.erase(ci);  // not staged after all (yet)
    return Staging::kReadOldBytes;
  } else {
    cb->valid = chunk_valid;  // a hole or a full overwrite: zeros so far
  }
  cs.staged = cb;
  cs.gen = ++gen_;
  return Staging::kStaged;
}

FileData::Staging FileData::StageRead(uint64_t ci, const std::shared_ptr<ChunkBuf>& cb,
                                      const InstalledChunk& old, uint64_t size_then,
                                      uint64_t size_now, uint64_t lo, uint64_t hi,
                                      InstalledChunk* again) {
  ChunkState& now = chunks_[ci];
  if (now.staged || now.inflight || now.installed_seq != old.seq || now.extents != old.extents ||
      size_now != size_then) {
    if (now.empty()) chunks_.erase(ci);
    return Stage(ci, cb, size_now, lo, hi, again);  // changed meanwhile: again
  }
  const uint64_t chunk_valid = ChunkValid(size_then, ci * kChunkBytes);
  if (chunk_valid < kChunkBytes) {
    std::memset(cb->buf.data() + chunk_valid, 0, kChunkBytes - chunk_valid);
  }
  cb->valid = chunk_valid;
  now.staged = cb;
  now.gen = ++gen_;
  return Staging::kStaged;
}

uint64_t FileData::ReservationShort(uint64_t ci, uint64_t hi) const {
  const ChunkBuf& cb = *chunks_.at(ci).staged;
  const uint64_t need = AlignUp(std::max(hi, cb.valid), kBlockSize);
  const uint64_t have = TotalLen(cb.alloc);
  return need > have ? need - have : 0;
}

const void* FileData::StagedId(uint64_t ci) const {
  auto it = chunks_.find(ci);
  return it == chunks_.end() ? nullptr : it->second.staged.get();
}

bool FileData::GrowReservation(uint64_t ci, const void* id, const std::vector<Extent>& more) {
  auto it = chunks_.find(ci);
  if (it == chunks_.end() || !it->second.staged || it->second.staged.get() != id) return false;
  std::vector<Extent>& alloc = it->second.staged->alloc;
  alloc.insert(alloc.end(), more.begin(), more.end());
  return true;
}

void FileData::CopyIn(uint64_t ci, uint64_t lo, uint64_t hi, const char* src) {
  ChunkState& cs = chunks_.at(ci);
  cs.gen = ++gen_;
  ChunkBuf& cb = *cs.staged;
  cb.ZeroTo(lo);  // a gap before this write reads as zeros
  std::memcpy(cb.buf.data() + lo, src, hi - lo);
  cb.clean = std::max(cb.clean, hi);
  cb.valid = std::max(cb.valid, hi);
}

std::shared_ptr<ChunkBuf> FileData::Submit(uint64_t ci, std::vector<Extent>* spare) {
  ChunkState& cs = chunks_[ci];
  cs.gen = ++gen_;
  std::shared_ptr<ChunkBuf> cb = std::move(cs.staged);
  cs.staged.reset();
  const uint64_t bytes = AlignUp(cb->valid, kBlockSize);
  cb->ZeroTo(bytes);  // the device gets zeros, not garbage, after the content
  // Keep exactly `bytes` of the reservation; return the rest.
  std::vector<Extent> keep;
  uint64_t left = bytes;
  for (const Extent& e : cb->alloc) {
    if (left == 0) {
      spare->push_back(e);
    } else if (e.len <= left) {
      keep.push_back(e);
      left -= e.len;
    } else {
      keep.push_back({e.device, e.byte_off, left});
      spare->push_back({e.device, e.byte_off + left, e.len - left});
      left = 0;
    }
  }
  cb->alloc = std::move(keep);
  if (bytes == 0) {
    // Nothing left in the chunk (truncated to its start): its old data goes.
    for (const auto& fe : cs.extents) free_pending_.push_back(fe.ext);
    cs.extents.clear();
    cs.installed_valid = 0;
    if (cs.empty()) chunks_.erase(ci);
    return nullptr;
  }
  cb->seq = ++chunk_seq_;
  cb->trunc_epoch = trunc_epoch_;
  cs.inflight = cb;
  BeginWrite();
  return cb;
}

WrittenOutcome FileData::Written(uint64_t ci, const std::shared_ptr<ChunkBuf>& cb,
                                 const Status& st, bool taken) {
  WrittenOutcome out;
  out.gates = EndWrite();
  auto it = chunks_.find(ci);
  if (it != chunks_.end()) it->second.gen = ++gen_;
  const bool current = it != chunks_.end() && !taken && cb->trunc_epoch == trunc_epoch_ &&
                       cb->seq > it->second.installed_seq;
  if (!st.ok()) {
    out.first_error = NoteWriteError(st.code());
    out.free_now = cb->alloc;
    if (it != chunks_.end() && cb->seq > it->second.installed_seq &&
        cb->trunc_epoch == trunc_epoch_) {
      it->second.failed = true;
    }
  } else if (current) {
    ChunkState& cs = it->second;
    for (const auto& fe : cs.extents) free_pending_.push_back(fe.ext);
    cs.extents.clear();
    std::vector<uint32_t> crcs;
    uint64_t pos = 0;
    for (const Extent& e : cb->alloc) {
      crcs.push_back(Crc32c(cb->buf.data() + pos, e.len));
      pos += e.len;
    }
    InstallExtents(cs, ci, cb->alloc, crcs);
    cs.installed_seq = cb->seq;
    cs.installed_valid = cb->valid;
    cs.failed = false;
    out.installed = true;
    out.queue_change = NoteInstalled();
  } else {
    out.free_now = cb->alloc;  // superseded or truncated away: never indexed
  }
  if (it != chunks_.end()) {
    if (it->second.inflight == cb) it->second.inflight.reset();
    if (it->second.empty()) chunks_.erase(it);
  }
  return out;
}

bool FileData::TruncateWritesHead(uint64_t new_size, uint64_t old_size) const {
  if (new_size >= old_size || new_size % kChunkBytes == 0) return false;
  return chunks_.count(new_size / kChunkBytes) > 0;
}

FileData::Head FileData::TakeHead(uint64_t new_size, char* buf) const {
  const uint64_t ci = new_size / kChunkBytes;
  const uint64_t cut = new_size % kChunkBytes;
  const ChunkState& cs = chunks_.at(ci);
  Head h;
  h.ci = ci;
  h.gen = cs.gen;
  // What reads of the chunk return now (PlanRead): the staged or the
  // in-flight version, else the installed one (a failed write's chunk
  // keeps the version before it, as a partial overwrite would).
  if (const ChunkBuf* mem = cs.staged ? cs.staged.get() : cs.inflight.get()) {
    mem->CopyOut(0, cut, buf);
    return h;
  }
  std::memset(buf, 0, cut);  // holes between the extents read as zeros
  for (const index::FileExtent& fe : cs.extents) {
    if (fe.file_off < ci * kChunkBytes + cut) h.read.push_back(fe);
  }
  return h;
}

bool FileData::HeadCurrent(const Head& h) const {
  auto it = chunks_.find(h.ci);
  return it != chunks_.end() && it->second.gen == h.gen;
}

void FileData::Truncate(uint64_t new_size, uint64_t old_size, std::vector<Extent>* free_now,
                        std::vector<uint64_t>* dropped, const WrittenHead* head) {
  if (new_size >= old_size) return;
  // What the last capture named past the cut is gone: a capture holds a
  // size back to no more than this.
  cut_since_capture_ = std::min(cut_since_capture_, new_size);
  const uint64_t cut = new_size % kChunkBytes;
  const uint64_t ci = new_size / kChunkBytes;
  trunc_epoch_++;  // in-flight versions of dropped chunks are obsolete
  const uint64_t first_dropped = AlignUp(new_size, kChunkBytes) / kChunkBytes;
  for (auto it = chunks_.lower_bound(first_dropped); it != chunks_.end();) {
    for (auto& fe : it->second.extents) free_pending_.push_back(fe.ext);
    if (it->second.staged) {
      free_now->insert(free_now->end(), it->second.staged->alloc.begin(),
                       it->second.staged->alloc.end());
    }
    dropped->push_back(it->first);
    it = chunks_.erase(it);
  }
  // Keep surviving in-flight chunks current despite the new epoch.
  for (auto& [c, cs] : chunks_) {
    if (cs.inflight) cs.inflight->trunc_epoch = trunc_epoch_;
  }
  if (head != nullptr) {
    // The head, written, is the chunk's version now: what was staged is in
    // it, a version being written lands obsolete (an older number), the
    // installed one is freed after the next capture.
    ChunkState& cs = chunks_[head->ci];
    for (const auto& fe : cs.extents) free_pending_.push_back(fe.ext);
    cs.extents.clear();
    if (cs.staged) {
      free_now->insert(free_now->end(), cs.staged->alloc.begin(), cs.staged->alloc.end());
      cs.staged.reset();
    }
    cs.inflight.reset();
    InstallExtents(cs, head->ci, head->alloc, head->crcs);
    cs.installed_seq = ++chunk_seq_;
    cs.installed_valid = head->valid;
    cs.failed = false;
    cs.gen = ++gen_;
    return;
  }
  auto it = chunks_.find(ci);
  if (cut != 0 && it != chunks_.end() && it->second.staged) {
    // Not reached (TruncateWritesHead asks for the head); kept consistent.
    ChunkBuf& cb = *it->second.staged;
    cb.clean = std::min(cb.clean, cut);  // the cut bytes are garbage now
    cb.valid = std::min(cb.valid, cut);
    it->second.gen = ++gen_;
  }
}

// ----------------------------------------------------------------- commits

uint64_t FileData::Capture(uint64_t size, uint64_t durable, std::vector<index::FileExtent>* extents,
                           std::vector<Extent>* frees) {
  durable = std::min(durable, cut_since_capture_);
  cut_since_capture_ = UINT64_MAX;
  // A chunk whose newest version is not written yet (staged, being
  // written, lost to a failed write) is named at its installed version
  // while that holds every byte the file has in the chunk: an older
  // version of it, written whole. The record is never held back below
  // data already written that a newer change has not reached the device
  // yet (a store's data, restaged by a rewrite before any capture named
  // it). Past the last captured size, and past what the installed
  // version holds, the size is held back to where that version ends (the
  // chunk's start if it has none), so a crash never shows a grown file
  // with a hole where unwritten data should be. Below the last captured
  // size a chunk's installed version stays named as that capture named it.
  for (const auto& [ci, cs] : chunks_) {
    if (!cs.staged && !cs.inflight && !cs.failed) continue;
    const uint64_t cstart = ci * kChunkBytes;
    if (cstart + kChunkBytes <= durable) continue;
    const uint64_t kept = cs.failed || cs.extents.empty() ? 0 : cs.installed_valid;
    if (kept >= ChunkValid(size, cstart)) continue;
    size = std::min(size, std::max(durable, cstart + kept));
    break;
  }
  // Every extent that holds bytes below the size. A chunk's installed
  // extents end at AlignUp(installed_valid), never past the file's size
  // (a truncate installs the head it cut first), so none crosses the
  // limit; one that does (a record an older kvfs wrote) is kept: leaving
  // it out would read its bytes below the size as zeros.
  const uint64_t limit = AlignUp(size, kBlockSize);
  for (const auto& [ci, cs] : chunks_) {
    for (const index::FileExtent& fe : cs.extents) {
      if (fe.file_off < limit) extents->push_back(fe);
    }
  }
  frees->insert(frees->end(), free_pending_.begin(), free_pending_.end());
  free_pending_.clear();
  Captured();
  return size;
}

void FileData::TakeAll(std::vector<Extent>* frees) {
  for (auto& [ci, cs] : chunks_) {
    for (const auto& fe : cs.extents) frees->push_back(fe.ext);
    cs.extents.clear();
    cs.installed_valid = 0;
  }
  frees->insert(frees->end(), free_pending_.begin(), free_pending_.end());
  free_pending_.clear();
}

// ------------------------------------------------------------ served opens

std::shared_ptr<FileMemory> FileData::served() const { return opens_ > 0 ? served_ : nullptr; }

int FileData::UsersOf(const FileMemory* m) const {
  if (m == nullptr) return 0;
  return (served_.get() == m ? opens_ : 0) + (awaited_.get() == m ? pending_ : 0);
}

bool FileData::OthersServedFrom(const FileMemory* m, int other_opens) const {
  return RuleHolds(m, other_opens, /*self=*/0);
}

bool FileData::RuleHolds(const FileMemory* m, int other_opens, int self) const {
  // The passthrough invariant, the one place it is checked: the opens the
  // inode table counts beside the asking one are exactly those served
  // from `m` or waiting for it (the asking one, if counted here, aside).
  return UsersOf(m) - self == other_opens;
}

void FileData::Publish(FileMemory& m) {
  // Served first: a memory that goes from awaited to served is never seen
  // unused by the cache, which reads the two without this lock.
  m.serves_opens_.store(served_.get() == &m && opens_ > 0, std::memory_order_release);
  m.awaited_.store(awaited_.get() == &m && pending_ > 0, std::memory_order_release);
}

void FileData::AddPending(std::shared_ptr<FileMemory> m) {
  if (pending_ == 0) awaited_ = std::move(m);
  // OthersServedFrom let it wait: no open waits for another memory.
  ++pending_;
  Publish(*awaited_);
}

bool FileData::EndPending(const std::shared_ptr<FileMemory>& m, bool may, bool current,
                          int file_opens, bool writable) {
  // The rule for the file's other opens: this one still waits for `m`,
  // counted among the file's opens and in UsersOf.
  const bool waiting = awaited_ == m && pending_ > 0;
  const bool serve = may && waiting && ((served_ == m && opens_ > 0) || current) &&
                     RuleHolds(m.get(), file_opens - 1, /*self=*/1);
  if (serve) {
    if (opens_ == 0) {
      served_ = m;
      written_ = false;
    }
    ++opens_;
    if (writable) written_ = true;
    Publish(*m);
  }
  if (awaited_ == m && pending_ > 0 && --pending_ == 0) {
    Publish(*m);
    awaited_.reset();
  }
  return serve;
}

void FileData::AddServed(bool writable) {
  // served(): every open of the file is served from it.
  ++opens_;
  if (writable) written_ = true;
}

bool FileData::ReleaseServed(const FileMemory& m) {
  if (served_.get() != &m || opens_ == 0) return false;
  if (--opens_ > 0) return false;
  const bool drop = written_;
  std::shared_ptr<FileMemory> was = std::move(served_);
  written_ = false;
  Publish(*was);
  return drop;
}

bool FileData::ServedAttrsOf(ServedAttrs* out) const {
  if (opens_ == 0 || !written_) return false;
  struct stat st;
  if (fstat(served_->fd(), &st) != 0) return false;
  out->size = static_cast<uint64_t>(st.st_size);
  out->mtime_ns = st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  return true;
}

Status FileData::ResizeServed(uint64_t size, bool grow_only) {
  if (opens_ == 0 || served_->state() != FileMemory::State::kReady) return Status::OK();
  struct stat st;
  if (fstat(served_->fd(), &st) != 0) return Status::Error(errno, "file memory");
  if (grow_only && static_cast<uint64_t>(st.st_size) >= size) return Status::OK();
  if (ftruncate(served_->fd(), static_cast<off_t>(size)) != 0) {
    return Status::Error(errno, "resizing file memory");
  }
  return Status::OK();
}

// ------------------------------------------------ device commands in flight

void FileData::BeginRead() { ++reads_in_flight_; }

std::vector<Extent> FileData::EndRead() {
  std::vector<Extent> frees;
  if (--reads_in_flight_ == 0) frees.swap(free_after_reads_);
  return frees;
}

bool FileData::KeepForReads(const std::vector<Extent>& extents) {
  if (reads_in_flight_ == 0) return false;
  free_after_reads_.insert(free_after_reads_.end(), extents.begin(), extents.end());
  return true;
}

void FileData::BeginWrite() { ++writes_in_flight_; }

std::vector<std::shared_ptr<Change>> FileData::EndWrite() {
  std::vector<std::shared_ptr<Change>> gates;
  if (--writes_in_flight_ == 0) gates.swap(gated_);
  return gates;
}

bool FileData::Gate(const std::shared_ptr<Change>& c) {
  if (writes_in_flight_ == 0) return false;
  c->gates = 1;
  gated_.push_back(c);
  return true;
}

bool FileData::NoteWriteError(int code) {
  if (write_error_ != 0) return false;
  write_error_ = code != 0 ? code : EIO;
  return true;
}

bool FileData::NoteInstalled() {
  if (change_queued_) return false;
  change_queued_ = true;
  return true;
}

bool FileData::Quiescent() const {
  if (writes_in_flight_ > 0 || change_queued_ || !gated_.empty()) return false;
  for (const auto& [ci, cs] : chunks_) {
    if (cs.staged || cs.inflight) return false;
  }
  return true;
}

// -------------------------------------------------- memory of the commands

device::IoRequest FileData::ReadInto(std::shared_ptr<const void> owner, char* at,
                                     uint32_t device, uint64_t byte_off, uint64_t len,
                                     std::function<void(Status)> done, const void* group) {
  device::IoRequest r;
  r.op = device::IoOp::kRead;
  r.device = device;
  r.byte_off = byte_off;
  r.buf = at;
  r.len = len;
  r.group = group;
  // The memory goes (if this was its last holder) after done has run.
  r.done = [owner = std::move(owner), done = std::move(done)](Status st) { done(st); };
  return r;
}

device::IoRequest FileData::WriteFrom(std::shared_ptr<const void> owner, const char* from,
                                      uint32_t device, uint64_t byte_off, uint64_t len,
                                      std::function<void(Status)> done) {
  device::IoRequest r;
  r.op = device::IoOp::kWrite;
  r.device = device;
  r.byte_off = byte_off;
  r.buf = const_cast<char*>(from);  // only read by a write
  r.len = len;
  r.done = [owner = std::move(owner), done = std::move(done)](Status st) { done(st); };
  return r;
}

}  // namespace kvfs::fs
