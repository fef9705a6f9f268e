// Whole-file operations of the batch ioctl: path walk with permission
// checks, LookupPath/ExistsPaths, ReadFile (device data straight into the
// caller's memory when it is 4 KiB aligned), DeleteFile and PrefetchFile.
// WriteFile is whole_file_write.cc. Path syntax: fs/path.h.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "common/format.h"
#include "fs/access.h"
#include "fs/file_system_impl.h"

namespace kvfs::fs {

// ---------------------------------------------------------------- path walk

Result<InodePin> FileSystem::Impl::WalkPath(uint64_t dir, std::string_view path,
                                            const Caller& caller, bool want_parent,
                                            std::string_view* leaf) {
  // Reused: a batch walks thousands of paths, and WalkPath never nests.
  thread_local std::vector<std::string_view> parts;
  parts.clear();
  KVFS_RETURN_IF_ERROR(SplitPath(path, &parts));
  KVFS_ASSIGN_OR_RETURN(InodePin cur, table_.GetPinned(dir));
  const size_t walk = parts.size() - (want_parent ? 1 : 0);
  for (size_t k = 0;; ++k) {
    if (k == walk && !want_parent) return cur;  // the named inode, of any type
    {
      MutexLock l(cur->mu());
      if (!cur->is_dir()) return Status::Error(ENOTDIR, "not a directory in the path");
      if (cur->deleted) return Status::Error(ENOENT, "directory removed");
      // Search permission on every directory a component is looked up in
      // (want_parent: the caller looks the last one up).
      KVFS_RETURN_IF_ERROR(CheckAccess(cur->rec.mode, cur->rec.uid, cur->rec.gid, caller, kMayExec));
    }
    if (k == walk) {  // want_parent: the directory that holds the last name
      if (leaf) *leaf = parts.back();
      return cur;
    }
    KVFS_ASSIGN_OR_RETURN(uint64_t child, ns_.Resolve(cur->ino, parts[k]));
    KVFS_ASSIGN_OR_RETURN(InodePin next, table_.GetPinned(child));
    cur = std::move(next);
  }
}

Result<Attr> FileSystem::Impl::LookupPath(uint64_t dir, std::string_view path,
                                          const Caller& caller) {
  // No lookup-driven prefetch here: a batch that asks STAT and then READs
  // reads straight into its own memory, and a cache copy would only cost.
  NamespaceReadLock ns(ns_.mu());  // a walk changes nothing ns_.mu() guards
  KVFS_ASSIGN_OR_RETURN(InodePin i, WalkPath(dir, path, caller, false, nullptr));
  MutexLock l(i->mu());
  UsedForEviction(*i, NowNs());  // the batch's STAT
  return ToAttr(i->rec);
}

void FileSystem::Impl::ExistsPaths(uint64_t dir, std::span<const std::string_view> paths,
                                   const Caller& caller, std::span<int> codes) {
  // One hold for the run: the walks change nothing, and the directory walked
  // for one name can serve the next. A namespace change that comes waits
  // for one name at most: the run lets it in between two names (and walks
  // again after it).
  NamespaceReadLock ns(ns_.mu());
  // The directory the previous name was in (walked, searchable by the
  // caller, pinned) and the path that led there: names in one directory
  // are looked up without walking again.
  // `parent_path` is the path up to and including its last '/' ("" for a
  // name in `dir` itself), so that "/x" or "a//x" never match a walked one.
  InodePin parent;
  std::string_view parent_path;
  thread_local std::vector<std::string_view> parts;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (i > 0 && ns_.mu().change_waiting()) {
      parent.Reset();  // the change may move or remove it
      ns.Unlock();
      ns.Lock();  // after the waiting change: the lock prefers writers
    }
    const std::string_view path = paths[i];
    const size_t slash = path.rfind('/');
    const size_t leaf_at = slash == std::string_view::npos ? 0 : slash + 1;
    const std::string_view dir_part = path.substr(0, leaf_at);
    std::string_view leaf;
    Status st;
    if (parent && dir_part == parent_path) {
      // The syntax checks a walk starts with (they take no lock); the
      // directories themselves were walked for the name before.
      parts.clear();
      st = SplitPath(path, &parts);
      if (st.ok()) leaf = parts.back();
    } else {
      parent.Reset();
      Result<InodePin> p = WalkPath(dir, path, caller, true, &leaf);
      st = p.status();
      if (st.ok()) {
        parent = std::move(p).value();
        parent_path = dir_part;
      }
    }
    if (st.ok()) {
      Result<uint64_t> found = ns_.Resolve(parent->ino, leaf);
      st = found.status();
      if (found.ok() && eviction_.order()) eviction_.order()->Touch(*found, NowNs());  // the batch's EXISTS
    }
    codes[i] = st.code();
  }
}

// ------------------------------------------------------------ delete, prefetch

Status FileSystem::Impl::DeleteFile(uint64_t dir, std::string_view path, const Caller& caller) {
  NamespaceWriteLock ns(ns_.mu());
  std::string_view leaf;
  KVFS_ASSIGN_OR_RETURN(InodePin p, WalkPath(dir, path, caller, true, &leaf));
  // Checked and done under one ns_.mu() hold, by the one unlink: the entry
  // checked is the one unlinked.
  return UnlinkLocked(p->ino, leaf, &caller);
}

Result<uint64_t> FileSystem::Impl::PrefetchFile(uint64_t dir, std::string_view path,
                                                const Caller& caller) {
  InodePin i;
  {
    NamespaceReadLock ns(ns_.mu());
    KVFS_ASSIGN_OR_RETURN(i, WalkPath(dir, path, caller, false, nullptr));
  }
  uint64_t started;
  {
    const InodeRef& f = i.ref();
    MutexLock l(f->mu());
    if (f->is_dir()) return Status::Error(EISDIR, "prefetch of a directory");
    KVFS_RETURN_IF_ERROR(CheckAccess(f->rec.mode, f->rec.uid, f->rec.gid, caller, kMayRead));
    started = PrefetchLocked(f);
  }
  if (started > 0) retained_.RetainPrefetch(table_.Pin(i.ref()));
  return started;
}

// ------------------------------------------------------------ ReadFile

void FileSystem::Impl::ReadFile(uint64_t dir, std::string_view path, uint64_t off,
                                std::span<char> dest, const Caller& caller,
                                std::function<void(Result<size_t>)> done, int attempts) {
  InodePin i;
  {
    NamespaceReadLock ns(ns_.mu());
    Result<InodePin> walked = WalkPath(dir, path, caller, false, nullptr);
    if (!walked.ok()) return done(walked.status());
    i = std::move(walked).value();
  }
  ReadPlan plan;
  uint64_t len = 0;
  Status fail;
  {
    const InodeRef& f = i.ref();
    MutexLock l(f->mu());
    if (f->deleted) {
      // Replaced or removed after the walk: its extents may be freed by now.
      fail = Status::Error(ESTALE, "file replaced while its read started");
    } else if (f->is_dir()) {
      fail = Status::Error(EISDIR, "read of a directory");
    } else {
      fail = CheckAccess(f->rec.mode, f->rec.uid, f->rec.gid, caller, kMayRead);
    }
    const uint64_t fsize = f->rec.size;
    if (fail.ok() && !dest.empty()) NoteUse(f, NowNs());
    if (fail.ok() && off < fsize && !dest.empty()) {
      len = std::min<uint64_t>(dest.size(), fsize - off);
      PlanRead(f, off, len, dest.data(), dest.size(), &plan);
      fail = plan.fail;
    }
  }
  if (!fail.ok() || !plan.has_work()) {
    if (!plan.loads.empty()) sched_->Submit(io::Lane::kRead, plan.loads);
    i.Reset();
    if (fail.code() == ESTALE && attempts > 1) {
      // The name names another file now: read that one (as the kernel
      // retries an open that raced a rename).
      return ReadFile(dir, path, off, dest, caller, std::move(done), attempts - 1);
    }
    if (!fail.ok()) return done(fail);
    return done(static_cast<size_t>(len));
  }
  // The walk's pin is given back by ExecuteRead's FinishDeviceRead.
  ExecuteRead(std::move(i), std::move(plan), dest.data(), nullptr,
              [len, done = std::move(done)](Status st) {
                if (!st.ok()) return done(st);
                done(static_cast<size_t>(len));
              });
}

}  // namespace kvfs::fs
