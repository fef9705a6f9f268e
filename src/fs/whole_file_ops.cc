// Whole-file operations of the batch ioctl: path walk with permission
// checks, ReadFile/WriteFile that move data between the device and the
// caller's memory without a copy when it is 4 KiB aligned, DeleteFile and
// PrefetchFile.
//
// WriteFile writes a new inode that has no name and no index record while
// its data goes to the device; when every write has completed, one change
// puts its record and switches the name to it (dropping the old file's link
// as rename-over does). The committer flushes the devices before that change
// (NoteDataWritten), so after a crash the name shows the old file or the
// complete new one -- the guarantee of write + close + rename, without a
// temp name anybody could see.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/crc32c.h"
#include "common/format.h"
#include "fs/access.h"
#include "fs/file_system_impl.h"

namespace kvfs::fs {

namespace {

// Bytes of a whole batch path; the ABI's KVFS_PATH_MAX (include/kvfs/ioctl.h).
constexpr size_t kMaxPathLen = 4096;


// Splits `path` into its components, checking only its syntax: EXDEV for a
// leading '/' or a ".." component (they would leave the directory),
// EINVAL for empty components (empty path, "a//b", "a/"), "." and NUL,
// ENAMETOOLONG for a component over kMaxNameLen or a path over
// kMaxPathLen bytes. The first bad component decides.
Status SplitPath(std::string_view path, std::vector<std::string_view>* parts) {
  if (path.size() > kMaxPathLen) return Status::Error(ENAMETOOLONG, "path over 4096 bytes");
  if (path.empty()) return Status::Error(EINVAL, "empty path");
  if (path.front() == '/') return Status::Error(EXDEV, "absolute path");
  for (;;) {
    const size_t slash = path.find('/');
    std::string_view part = path.substr(0, slash);
    if (part == "..") return Status::Error(EXDEV, "'..' in a path");
    if (part.empty() || part == ".") return Status::Error(EINVAL, "empty or '.' path component");
    if (part.size() > kMaxNameLen) {
      return Status::Error(ENAMETOOLONG, "path component of " + std::to_string(part.size()) + " bytes");
    }
    if (part.find('\0') != std::string_view::npos) return Status::Error(EINVAL, "NUL in a path");
    parts->push_back(part);
    if (slash == std::string_view::npos) return Status::OK();
    path.remove_prefix(slash + 1);
  }
}

}  // namespace

// ---------------------------------------------------------------- path walk

Status FileSystem::Impl::WalkPath(uint64_t dir, std::string_view path, const Caller& caller,
                                  bool want_parent, InodeRef* out, std::string_view* leaf) {
  // Reused: a batch walks thousands of paths, and WalkPath never nests.
  thread_local std::vector<std::string_view> parts;
  parts.clear();
  KVFS_RETURN_IF_ERROR(SplitPath(path, &parts));
  KVFS_ASSIGN_OR_RETURN(InodeRef cur, GetPinned(dir));
  const size_t walk = parts.size() - (want_parent ? 1 : 0);
  for (size_t k = 0;; ++k) {
    if (k == walk && !want_parent) {
      *out = std::move(cur);  // the named inode, of any type
      return Status::OK();
    }
    Status st;
    {
      std::lock_guard<std::mutex> l(cur->mu);
      if (!cur->is_dir()) {
        st = Status::Error(ENOTDIR, "not a directory in the path");
      } else if (cur->deleted) {
        st = Status::Error(ENOENT, "directory removed");
      } else {
        // Search permission on every directory a component is looked up in
        // (want_parent: the caller looks the last one up).
        st = CheckAccess(cur->rec.mode, cur->rec.uid, cur->rec.gid, caller, kMayExec);
      }
    }
    if (!st.ok()) {
      Unpin(cur);
      return st;
    }
    if (k == walk) {  // want_parent: the directory that holds the last name
      if (leaf) *leaf = parts.back();
      *out = std::move(cur);
      return Status::OK();
    }
    auto child = ResolveEntry(cur->rec.ino, parts[k]);
    if (!child.ok()) {
      Unpin(cur);
      return child.status();
    }
    auto next = GetPinned(*child);
    Unpin(cur);
    if (!next.ok()) return next.status();
    cur = std::move(next).value();
  }
}

Result<Attr> FileSystem::Impl::LookupPath(uint64_t dir, std::string_view path,
                                          const Caller& caller) {
  // No lookup-driven prefetch here: a batch that asks STAT and then READs
  // reads straight into its own memory, and a cache copy would only cost.
  std::shared_lock<RwLock> ns(ns_mu_);  // a walk changes nothing ns_mu_ guards
  InodeRef i;
  KVFS_RETURN_IF_ERROR(WalkPath(dir, path, caller, false, &i, nullptr));
  Attr a;
  {
    std::lock_guard<std::mutex> l(i->mu);
    a = ToAttr(i->rec);
  }
  Unpin(i);
  return a;
}

void FileSystem::Impl::ExistsPaths(uint64_t dir, std::span<const std::string_view> paths,
                                   const Caller& caller, std::span<int> codes) {
  // One hold for the run: the walks change nothing, and the directory walked
  // for one name can serve the next. A namespace change waits for at most
  // the run (<= 32 names in a batch).
  std::shared_lock<RwLock> ns(ns_mu_);
  // The directory the previous name was in (walked, searchable by the
  // caller, pinned) and the path that led there: names in one directory
  // are looked up without walking again.
  // `parent_path` is the path up to and including its last '/' ("" for a
  // name in `dir` itself), so that "/x" or "a//x" never match a walked one.
  struct PinnedDir {  // unpinned however the loop ends
    FileSystem::Impl* fs;
    InodeRef ref;
    ~PinnedDir() { Reset(); }
    void Reset() {
      if (ref) fs->Unpin(ref);
      ref.reset();
    }
  } parent{this, nullptr};
  std::string_view parent_path;
  thread_local std::vector<std::string_view> parts;
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string_view path = paths[i];
    const size_t slash = path.rfind('/');
    const size_t leaf_at = slash == std::string_view::npos ? 0 : slash + 1;
    const std::string_view dir_part = path.substr(0, leaf_at);
    std::string_view leaf;
    Status st;
    if (parent.ref && dir_part == parent_path) {
      // The syntax checks a walk starts with (they take no lock); the
      // directories themselves were walked for the name before.
      parts.clear();
      st = SplitPath(path, &parts);
      if (st.ok()) leaf = parts.back();
    } else {
      parent.Reset();
      st = WalkPath(dir, path, caller, true, &parent.ref, &leaf);
      if (st.ok()) parent_path = dir_part;
    }
    if (st.ok()) st = ResolveEntry(parent.ref->rec.ino, leaf).status();
    codes[i] = st.code();
  }
}

// ------------------------------------------------------------ delete, prefetch

Status FileSystem::Impl::DeleteFile(uint64_t dir, std::string_view path, const Caller& caller) {
  std::lock_guard<RwLock> ns(ns_mu_);
  InodeRef p;
  std::string_view leaf;
  KVFS_RETURN_IF_ERROR(WalkPath(dir, path, caller, true, &p, &leaf));
  // Checked and done under one ns_mu_ hold: the entry checked is the one
  // unlinked.
  Status st = [&]() -> Status {
    uint32_t dir_mode, dir_uid;
    {
      std::lock_guard<std::mutex> l(p->mu);
      dir_mode = p->rec.mode;
      dir_uid = p->rec.uid;
    }
    KVFS_ASSIGN_OR_RETURN(uint64_t ino, ResolveEntry(p->rec.ino, leaf));
    {
      std::lock_guard<std::mutex> l(p->mu);
      KVFS_RETURN_IF_ERROR(
          CheckAccess(dir_mode, dir_uid, p->rec.gid, caller, kMayWrite | kMayExec));
    }
    KVFS_ASSIGN_OR_RETURN(InodeRef v, GetInode(ino));
    uint32_t victim_uid;
    {
      std::lock_guard<std::mutex> l(v->mu);
      victim_uid = v->rec.uid;
    }
    KVFS_RETURN_IF_ERROR(CheckSticky(dir_mode, dir_uid, victim_uid, caller));
    return UnlinkLocked(p->rec.ino, leaf);  // the one unlink: EISDIR for a directory
  }();
  Unpin(p);
  return st;
}

Result<uint64_t> FileSystem::Impl::PrefetchFile(uint64_t dir, std::string_view path,
                                                const Caller& caller) {
  InodeRef i;
  {
    std::shared_lock<RwLock> ns(ns_mu_);
    KVFS_RETURN_IF_ERROR(WalkPath(dir, path, caller, false, &i, nullptr));
  }
  Result<uint64_t> r = [&]() -> Result<uint64_t> {
    std::lock_guard<std::mutex> l(i->mu);
    if (i->is_dir()) return Status::Error(EISDIR, "prefetch of a directory");
    KVFS_RETURN_IF_ERROR(CheckAccess(i->rec.mode, i->rec.uid, i->rec.gid, caller, kMayRead));
    return Prefetch(i);
  }();
  if (r.ok() && *r > 0) RetainPrefetched(i);
  Unpin(i);
  return r;
}

void FileSystem::Impl::RetainPrefetched(const InodeRef& inode, std::deque<InodeRef>* list,
                                        size_t max) {
  // The batch holds no kernel lookup on the file: without a pin the inode
  // would leave the table when its loads finish, and its cache entries
  // (keyed by the InodeState) with it.
  std::lock_guard<std::mutex> t(table_mu_);
  inode->pending_changes++;
  list->push_back(inode);
  if (list->size() > max) {
    InodeRef old = std::move(list->front());
    list->pop_front();
    old->pending_changes--;
    MaybeEvict(old);
  }
}

// ------------------------------------------------------------ ReadFile

void FileSystem::Impl::ReadFile(uint64_t dir, std::string_view path, uint64_t off,
                                std::span<char> dest, const Caller& caller,
                                std::function<void(Result<size_t>)> user_done, int attempts) {
  const auto start = std::chrono::steady_clock::now();
  auto user = std::make_shared<std::function<void(Result<size_t>)>>(std::move(user_done));
  auto done = [this, start, user](Result<size_t> r) {
    metrics_.Record(Op::kRead, ElapsedNs(start), r.ok() ? *r : 0);
    if (!r.ok()) metrics_.Error(r.status().code());
    (*user)(std::move(r));
  };
  InodeRef i;
  {
    std::shared_lock<RwLock> ns(ns_mu_);
    Status st = WalkPath(dir, path, caller, false, &i, nullptr);
    if (!st.ok()) return done(st);
  }
  ReadPlan plan;
  uint64_t len = 0;
  Status fail;
  {
    std::lock_guard<std::mutex> l(i->mu);
    if (i->deleted) {
      // Replaced or removed after the walk: its extents may be freed by now.
      fail = Status::Error(ESTALE, "file replaced while its read started");
    } else if (i->is_dir()) {
      fail = Status::Error(EISDIR, "read of a directory");
    } else {
      fail = CheckAccess(i->rec.mode, i->rec.uid, i->rec.gid, caller, kMayRead);
    }
    const uint64_t fsize = i->rec.size;
    if (fail.ok() && off < fsize && !dest.empty()) {
      len = std::min<uint64_t>(dest.size(), fsize - off);
      PlanRead(i, off, len, dest.data(), dest.size(), &plan);
      fail = plan.fail;
    }
  }
  if (!fail.ok() || !plan.has_work()) {
    if (!plan.loads.empty()) sched_->Submit(io::Lane::kRead, plan.loads);
    Unpin(i);
    if (fail.code() == ESTALE && attempts > 1) {
      // The name names another file now: read that one (as the kernel
      // retries an open that raced a rename).
      return ReadFile(dir, path, off, dest, caller, std::move(*user), attempts - 1);
    }
    if (!fail.ok()) return done(fail);
    return done(static_cast<size_t>(len));
  }
  // The walk's pin is given back by ExecuteRead's FinishDeviceRead.
  ExecuteRead(i, std::move(plan), dest.data(), nullptr, [len, done](Status st) {
    if (!st.ok()) return done(st);
    done(static_cast<size_t>(len));
  });
}

// ------------------------------------------------------------ WriteFile

void FileSystem::Impl::WriteFile(uint64_t dir, std::string_view path, std::span<const char> data,
                                 const Caller& caller, std::function<void(Status)> user_done) {
  const auto start = std::chrono::steady_clock::now();
  auto done = [this, start, size = data.size(), user_done = std::move(user_done)](Status st) {
    metrics_.Record(Op::kWrite, ElapsedNs(start), st.ok() ? size : 0);
    if (!st.ok()) metrics_.Error(st.code());
    user_done(std::move(st));
  };
  // What rename(2) over `leaf` checks: write and search permission on the
  // directory, the sticky rule, and no directory in the way. Yields the
  // file being replaced, or null. REQUIRES: ns_mu_ held.
  auto check_replace = [this](const InodeRef& p, const std::string& leaf,
                              const Caller& who) -> Result<InodeRef> {
    uint32_t dir_mode, dir_uid;
    {
      std::lock_guard<std::mutex> l(p->mu);
      if (p->deleted) return Status::Error(ENOENT, "directory removed");
      KVFS_RETURN_IF_ERROR(
          CheckAccess(p->rec.mode, p->rec.uid, p->rec.gid, who, kMayWrite | kMayExec));
      dir_mode = p->rec.mode;
      dir_uid = p->rec.uid;
    }
    auto e = ResolveEntry(p->rec.ino, leaf);
    if (!e.ok()) {
      if (e.status().code() == ENOENT) return InodeRef();
      return e.status();
    }
    KVFS_ASSIGN_OR_RETURN(InodeRef y, GetInode(*e));
    std::lock_guard<std::mutex> l(y->mu);
    KVFS_RETURN_IF_ERROR(CheckSticky(dir_mode, dir_uid, y->rec.uid, who));
    if (y->is_dir()) return Status::Error(EISDIR, "a directory has that name");
    return y;
  };
  InodeRef parent;
  std::string leaf;
  {
    std::lock_guard<RwLock> ns(ns_mu_);
    std::string_view name;
    Status st = WalkPath(dir, path, caller, true, &parent, &name);
    if (!st.ok()) return done(st);
    leaf = std::string(name);
    auto y = check_replace(parent, leaf, caller);
    if (!y.ok()) {
      Unpin(parent);
      return done(y.status());
    }
  }

  // Space for every chunk, reserved before any byte is written: a full
  // volume fails the call with ENOSPC and leaves the old file as it was.
  struct ChunkPlan {
    uint64_t valid = 0;            // content bytes of the chunk
    std::vector<Extent> alloc;     // AlignUp(valid) bytes
    std::vector<uint32_t> crcs;    // per extent, filled as writes complete
  };
  const uint64_t size = data.size();
  const uint64_t nchunks = (size + kChunkBytes - 1) / kChunkBytes;
  std::vector<ChunkPlan> plan(nchunks);
  auto free_plan = [this](std::vector<ChunkPlan>& p) {
    for (ChunkPlan& c : p) {
      FreeNow(c.alloc);
      c.alloc.clear();
    }
  };
  for (int attempt = 0;; ++attempt) {
    Status st;
    for (uint64_t ci = 0; ci < nchunks && st.ok(); ++ci) {
      plan[ci].valid = std::min(kChunkBytes, size - ci * kChunkBytes);
      auto a = volume_.Allocate(AlignUp(plan[ci].valid, kBlockSize));
      if (a.ok()) {
        plan[ci].alloc = std::move(a).value();
      } else {
        st = a.status();
      }
    }
    if (st.ok()) break;
    free_plan(plan);
    if (st.code() != ENOSPC || attempt > 0) {
      Unpin(parent);
      return done(st);
    }
    // Space freed by unlinks becomes free when their commit lands.
    committer_->Drain(false).ignore();  // errors surface through the retry
  }

  struct WriteState {
    InodeRef parent;
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
    std::atomic<size_t> left;
    std::atomic<uint64_t> zero_copy{0};
    std::mutex mu;
    Status first;  // GUARDED_BY(mu)
    std::function<void(Status)> done;
  };
  auto ws = std::make_shared<WriteState>();
  ws->parent = std::move(parent);
  ws->leaf = std::move(leaf);
  ws->caller = caller;
  ws->size = size;
  ws->plan = std::move(plan);
  ws->done = std::move(done);

  std::vector<device::IoRequest> reqs;
  // One device write: part of an extent (skip bytes into it, len bytes),
  // from the caller's memory or a bounce buffer.
  struct Source {
    uint64_t ci;
    size_t ext;
    uint64_t skip;
    const char* buf;
    bool direct;
    uint64_t len;
    bool split;  // one of the two halves of ws->split: its crc comes at the end
    uint32_t before = 0;  // direct: crc32c of the caller's bytes before the write
  };
  std::vector<Source> sources;
  for (uint64_t ci = 0; ci < nchunks; ++ci) {
    ChunkPlan& c = ws->plan[ci];
    c.crcs.assign(c.alloc.size(), 0);
    uint64_t pos = 0;
    for (size_t e = 0; e < c.alloc.size(); ++e) {
      const Extent& ext = c.alloc[e];
      const char* src = data.data() + ci * kChunkBytes + pos;
      const bool aligned = IsBlockAligned(src);
      if (aligned && pos + ext.len <= c.valid) {
        sources.push_back({ci, e, 0, src, true, ext.len, false});
        pos += ext.len;
        continue;
      }
      // Unaligned memory, or the file's last partial block: a padded copy
      // of it; with aligned memory only of that last block.
      const uint64_t have = pos < c.valid ? std::min(ext.len, c.valid - pos) : 0;
      const uint64_t head = aligned ? AlignDown(have, kBlockSize) : 0;
      const uint64_t tail = ext.len - head;
      LargeBuffer b = LargeBuffer::Allocate(tail);
      if (!b) {
        free_plan(ws->plan);
        Unpin(ws->parent);
        return ws->done(Status::Error(ENOMEM, "write bounce buffer"));
      }
      std::memcpy(b.get(), src + head, have - head);
      std::memset(b.get() + (have - head), 0, tail - (have - head));
      if (head > 0) {
        ws->split = {ci, e, src, head, b.get(), tail};
        sources.push_back({ci, e, 0, src, true, head, true});
      }
      sources.push_back({ci, e, head, b.get(), false, tail, head > 0});
      ws->bounce.push_back(std::move(b));
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
  for (Source& s : sources) {
    if (s.direct) s.before = Crc32c(s.buf, s.len);
  }
  ws->left = sources.size();  // no count for the setup: see ReadFile
  // Every write has completed: give the name to the new inode, as
  // rename-over would, in one queued change (on an engine thread, or the
  // caller's when nothing was written).
  auto finish = [this, ws, check_replace, free_plan] {
    // Even a failed write makes the next commit flush first (as the
    // write-behind path does).
    committer_->NoteDataWritten();
    Status st;
    {
      std::lock_guard<std::mutex> l(ws->mu);
      st = ws->first;
    }
    if (st.ok() && ws->split) {
      const auto& sp = *ws->split;
      ws->plan[sp.ci].crcs[sp.ext] = Crc32cExtend(sp.head_crc, sp.tail, sp.tail_len);
    }
    if (st.ok()) {
      std::lock_guard<RwLock> ns(ns_mu_);
      // Checked again: the namespace may have changed while data was written.
      auto y = check_replace(ws->parent, ws->leaf, ws->caller);
      if (!y.ok()) {
        st = y.status();
      } else {
        const int64_t now = NowNs();
        const InodeRef& p = ws->parent;
        index::Inode rec;
        rec.ino = volume_.index().AllocateIno();
        rec.mode = S_IFREG | 0644;
        rec.uid = ws->caller.uid;
        rec.gid = ws->caller.gid;
        rec.nlink = 1;
        rec.size = ws->size;
        rec.atime_ns = rec.mtime_ns = rec.ctime_ns = now;
        rec.generation = 1;
        auto file = std::make_shared<InodeState>(rec, next_token_++);
        file->durable_nlink = rec.nlink;
        for (uint64_t ci = 0; ci < ws->plan.size(); ++ci) {
          ChunkState& cs = file->chunks[ci];
          uint64_t pos = 0;
          const ChunkPlan& c = ws->plan[ci];
          for (size_t e = 0; e < c.alloc.size(); ++e) {
            index::FileExtent fe;
            fe.file_off = ci * kChunkBytes + pos;
            fe.ext = c.alloc[e];
            fe.crc32c = c.crcs[e];
            cs.extents.push_back(fe);
            pos += c.alloc[e].len;
          }
          cs.installed_seq = ++file->chunk_seq;
        }
        {
          std::lock_guard<std::mutex> t(table_mu_);
          inodes_.emplace(rec.ino, file);
        }
        auto c = NewChange();
        c->entry_ops.push_back({p->rec.ino, ws->leaf, rec.ino});
        c->inodes = {file, p};
        const InodeRef& old = *y;
        if (old) DropLink(*old, old, *c, table_mu_, now);  // its readers keep it (rename-over)
        {
          std::lock_guard<std::mutex> l(p->mu);
          if (!old) p->rec.size++;
          p->rec.mtime_ns = p->rec.ctime_ns = now;
        }
        c->deltas.push_back({p, old ? 0 : +1, 0});
        SetPendingEntry(p->rec.ino, ws->leaf, rec.ino);
        Enqueue(c);
      }
    }
    if (!st.ok()) free_plan(ws->plan);
    Unpin(ws->parent);
    if (st.ok()) metrics_.ZeroCopy(ws->zero_copy.load());
    ws->done(std::move(st));
  };
  auto finish_one = [ws, finish] {
    if (ws->left.fetch_sub(1) == 1) finish();
  };
  for (const Source& s : sources) {
    const Extent& ext = ws->plan[s.ci].alloc[s.ext];
    device::IoRequest r;
    r.op = device::IoOp::kWrite;
    r.device = ext.device;
    r.byte_off = ext.byte_off + s.skip;
    r.buf = const_cast<char*>(s.buf);  // only read by a write
    r.len = s.len;
    r.done = [ws, s, finish_one](Status st) {
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
      if (!st.ok()) {
        std::lock_guard<std::mutex> l(ws->mu);
        if (ws->first.ok()) ws->first = st;
      }
      finish_one();
    };
    reqs.push_back(std::move(r));
  }
  if (reqs.empty()) return finish();  // empty data: nothing to write
  sched_->Submit(io::Lane::kWrite, reqs);
}

}  // namespace kvfs::fs
