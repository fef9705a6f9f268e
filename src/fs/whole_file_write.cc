// WriteFile: the batch ioctl's whole-file store.
//
// WriteFile writes a new inode that has no name and no index record while
// its data goes to the device; when every write has completed, one change
// puts its record and switches the name to it (dropping the old file's link
// as rename-over does). The committer flushes the devices before that change
// (NoteDataWritten), so after a crash the name shows the old file or the
// complete new one -- the guarantee of write + close + rename, without a
// temp name anybody could see.
//
// In steps: check the name (CheckReplace), reserve space for every chunk
// (ReserveWholeFile), plan each device write from the caller's memory or a
// bounce buffer (PlanSources), submit them, and when the last completes
// install the new inode under the name (FinishWriteFile).
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/crc32c.h"
#include "common/format.h"
#include "fs/countdown.h"
#include "fs/file_system_impl.h"

namespace kvfs::fs {

namespace {

// One chunk of the new file: its content bytes and the space reserved.
struct ChunkPlan {
  uint64_t valid = 0;          // content bytes of the chunk
  std::vector<Extent> alloc;   // AlignUp(valid) bytes
  std::vector<uint32_t> crcs;  // per extent, filled as writes complete
};

// One device write: part of an extent (skip bytes into it, len bytes),
// from the caller's memory or a bounce buffer.
struct Source {
  uint64_t ci;
  size_t ext;
  uint64_t skip;
  const char* buf;
  bool direct;
  uint64_t len;
  bool split;           // one of the two halves of WriteState::split: its crc comes at the end
  uint32_t before = 0;  // direct: crc32c of the caller's bytes before the write
};

}  // namespace

struct FileSystem::Impl::WriteState {
  InodePin parent;
  std::string leaf;
  Caller caller;
  uint64_t size = 0;
  std::vector<ChunkPlan> plan;
  std::vector<LargeBuffer> bounce;
  // The extent written in two halves (aligned memory, partial last block):
  // its crc32c is computed once both are written.
  struct Split {
    uint64_t ci = 0;
    size_t ext = 0;
    const char* head = nullptr;
    uint64_t head_len = 0;
    const char* tail = nullptr;
    uint64_t tail_len = 0;
    uint32_t head_crc = 0;  // of the head as written (checked like any direct source)
  };
  std::optional<Split> split;
  Countdown writes;
  std::atomic<uint64_t> zero_copy{0};
  std::function<void(Status)> done;

  void FreePlan(FileSystem::Impl& fs) {
    for (ChunkPlan& c : plan) {
      fs.FreeNow(c.alloc);
      c.alloc.clear();
    }
  }
};

Result<InodeRef> FileSystem::Impl::CheckReplace(const InodeRef& p, std::string_view leaf,
                                                const Caller& who) {
  {
    MutexLock l(p->mu());
    if (p->deleted) return Status::Error(ENOENT, "directory removed");
  }
  KVFS_RETURN_IF_ERROR(MayChangeNamesIn(p, &who));
  auto e = ns_.Resolve(p->ino, leaf);
  if (!e.ok()) {
    if (e.status().code() == ENOENT) return InodeRef();
    return e.status();
  }
  KVFS_ASSIGN_OR_RETURN(InodeRef y, table_.Get(*e));
  KVFS_RETURN_IF_ERROR(MayTakeName(p, y, &who));
  if (y->is_dir()) return Status::Error(EISDIR, "a directory has that name");
  return y;
}

// Space for every chunk of a `size`-byte file, reserved before any byte is
// written: a full volume fails the call with ENOSPC (after waiting once for
// queued commits) and leaves the old file as it was.
static Status ReserveWholeFile(volume::Volume& volume, uint64_t size, uint64_t seed,
                               std::vector<ChunkPlan>* plan,
                               const std::function<void(std::vector<ChunkPlan>&)>& free_plan) {
  const uint64_t nchunks = (size + kChunkBytes - 1) / kChunkBytes;
  plan->assign(nchunks, ChunkPlan{});
  for (uint64_t ci = 0; ci < nchunks; ++ci) {
    ChunkPlan& c = (*plan)[ci];
    c.valid = std::min(kChunkBytes, size - ci * kChunkBytes);
    auto a = volume.Allocate(AlignUp(c.valid, kBlockSize), volume::PlacementHint{seed, ci});
    if (!a.ok()) {
      free_plan(*plan);
      return a.status();
    }
    c.alloc = std::move(a).value();
  }
  return Status::OK();
}

// The device writes of `ws`'s plan for `data`: 4 KiB aligned memory is
// written from where it is; unaligned memory, and the file's last partial
// block, from a padded copy in ws->bounce. ENOMEM without bounce memory.
static Status PlanSources(FileSystem::Impl::WriteState& ws, std::span<const char> data,
                          std::vector<Source>* sources) {
  for (uint64_t ci = 0; ci < ws.plan.size(); ++ci) {
    ChunkPlan& c = ws.plan[ci];
    c.crcs.assign(c.alloc.size(), 0);
    uint64_t pos = 0;
    for (size_t e = 0; e < c.alloc.size(); ++e) {
      const Extent& ext = c.alloc[e];
      const char* src = data.data() + ci * kChunkBytes + pos;
      const bool aligned = IsBlockAligned(src);
      if (aligned && pos + ext.len <= c.valid) {
        sources->push_back({ci, e, 0, src, true, ext.len, false});
        pos += ext.len;
        continue;
      }
      // Unaligned memory, or the file's last partial block: a padded copy
      // of it; with aligned memory only of that last block.
      const uint64_t have = pos < c.valid ? std::min(ext.len, c.valid - pos) : 0;
      const uint64_t head = aligned ? AlignDown(have, kBlockSize) : 0;
      const uint64_t tail = ext.len - head;
      LargeBuffer b = LargeBuffer::Allocate(tail);
      if (!b) return Status::Error(ENOMEM, "write bounce buffer");
      std::memcpy(b.get(), src + head, have - head);
      std::memset(b.get() + (have - head), 0, tail - (have - head));
      if (head > 0) {
        ws.split = FileSystem::Impl::WriteState::Split{ci, e, src, head, b.get(), tail};
        sources->push_back({ci, e, 0, src, true, head, true});
      }
      sources->push_back({ci, e, head, b.get(), false, tail, head > 0});
      ws.bounce.push_back(std::move(b));
      pos += ext.len;
    }
  }
  // The device reads a direct source from the caller's shared memory, which
  // the caller can still change. The extent's checksum must be of the bytes
  // the device got: it is taken before the write and again after, and if
  // they differ the entry fails (EBUSY) and nothing is written, rather than
  // a file that fsck --verify-data (or verify=on) would find corrupt. Bytes
  // changed and changed back in between go unseen; only a copy would close
  // that, at the cost of the zero-copy path.
  for (Source& s : *sources) {
    if (s.direct) s.before = Crc32c(s.buf, s.len);
  }
  return Status::OK();
}

void FileSystem::Impl::WriteFile(uint64_t dir, std::string_view path, std::span<const char> data,
                                 const Caller& caller, std::function<void(Status)> done) {
  auto ws = std::make_shared<WriteState>();
  ws->caller = caller;
  ws->size = data.size();
  ws->done = std::move(done);
  {
    NamespaceReadLock ns(ns_.mu());  // checks only; FinishWriteFile checks again
    std::string_view name;
    Result<InodePin> p = WalkPath(dir, path, caller, true, &name);
    if (!p.ok()) return ws->done(p.status());
    ws->parent = std::move(p).value();
    ws->leaf = std::string(name);
    Status st = CheckReplace(ws->parent.ref(), ws->leaf, caller).status();
    if (!st.ok()) return ws->done(st);
  }
  Status st = WithSpace(
      AlignUp(ws->size, kBlockSize),
      [&] {
        // The inode does not exist yet: its name spreads it over the devices.
        const uint64_t seed =
            volume::NameSeed(ws->parent.ref()->ino, ws->leaf.data(), ws->leaf.size());
        return ReserveWholeFile(volume_, ws->size, seed, &ws->plan,
                                [this, &ws](std::vector<ChunkPlan>&) { ws->FreePlan(*this); });
      },
      nullptr);
  if (!st.ok()) return ws->done(st);

  std::vector<Source> sources;
  st = PlanSources(*ws, data, &sources);
  if (!st.ok()) {
    ws->FreePlan(*this);
    return ws->done(st);
  }
  if (sources.empty()) return FinishWriteFile(ws);  // empty data: nothing to write
  ws->writes.Reset(sources.size());  // no part for the setup: see ReadFile
  std::vector<device::IoRequest> reqs;
  for (const Source& s : sources) {
    const Extent& ext = ws->plan[s.ci].alloc[s.ext];
    device::IoRequest r;
    r.op = device::IoOp::kWrite;
    r.device = ext.device;
    r.byte_off = ext.byte_off + s.skip;
    r.buf = const_cast<char*>(s.buf);  // only read by a write
    r.len = s.len;
    r.done = [this, ws, s](Status st) {
      if (st.ok() && s.direct) {
        // The caller's bytes are still mapped: its done has not run.
        if (Crc32c(s.buf, s.len) != s.before) {
          st = Status::Error(EBUSY, "the memory of a WRITE entry changed while it was written");
        } else if (s.split) {
          ws->split->head_crc = s.before;
        } else {
          ws->plan[s.ci].crcs[s.ext] = s.before;
        }
        if (st.ok()) ws->zero_copy.fetch_add(s.len, std::memory_order_relaxed);
      } else if (st.ok() && !s.split) {
        ws->plan[s.ci].crcs[s.ext] = Crc32c(s.buf, s.len);  // a bounce buffer's own copy
      }
      if (ws->writes.Finish(st)) FinishWriteFile(ws);
    };
    reqs.push_back(std::move(r));
  }
  sched_->Submit(io::Lane::kWrite, reqs);
}

void FileSystem::Impl::FinishWriteFile(const std::shared_ptr<WriteState>& ws) {
  // Even a failed write makes the next commit flush first (as the
  // write-behind path does).
  committer_->NoteDataWritten();
  Status st = ws->writes.first();
  if (st.ok() && ws->split) {
    const auto& sp = *ws->split;
    ws->plan[sp.ci].crcs[sp.ext] = Crc32cExtend(sp.head_crc, sp.tail, sp.tail_len);
  }
  if (st.ok()) {
    NamespaceWriteLock ns(ns_.mu());
    // Checked again: the namespace may have changed while data was written.
    const InodeRef& p = ws->parent.ref();
    Result<InodeRef> y = CheckReplace(p, ws->leaf, ws->caller);
    if (!y.ok()) {
      st = y.status();
    } else {
      NameChange change = NewNameChange();
      index::Inode rec = NewRecord(S_IFREG | 0644, ws->caller, change.now_ns());
      InheritSetgid(*p, &rec);
      rec.size = ws->size;
      InodeRef file = table_.Make(rec);
      {
        MutexLock l(file->mu());  // no one else sees it yet
        for (uint64_t ci = 0; ci < ws->plan.size(); ++ci) {
          file->data.Install(ci, ws->plan[ci].alloc, ws->plan[ci].crcs, ws->plan[ci].valid);
        }
      }
      table_.Insert(file, /*lookups=*/0, /*opens=*/0);
      // The replaced file's readers keep it (as rename-over).
      change.Replace(p, ws->leaf, file, *y);
      QueueNameChange(change);
    }
  }
  if (!st.ok()) ws->FreePlan(*this);
  ws->parent.Reset();
  if (st.ok()) metrics_.ZeroCopy(ws->zero_copy.load());
  ws->done(std::move(st));
}

}  // namespace kvfs::fs
