// The control directory MOUNT/.kvfs/ (see control.h).
#include "fuse/control.h"

#include <fcntl.h>
#include <unistd.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/mutex.h"
#include "fs/stats.h"
#include "fuse/op_counters.h"
#include "fuse/permissions.h"
#include "fuse/reply.h"
#include "fuse/request_loop.h"
#include "fuse/stats_render.h"
#include "fuse/passthrough.h"
#include "fuse/uring_transport.h"

namespace kvfs::fuse::control {

namespace {

enum class Kind { kDir, kStats, kMetrics, kDropCache, kPrefetch, kSync, kEvict };

struct Node {
  const char* name;
  fuse_ino_t ino;
  Kind kind;
  mode_t mode;
};

// Readable files are world-readable; the actions are root's alone.
constexpr std::array<Node, 6> kFiles = {{
    {"stats", kFirstIno + 1, Kind::kStats, S_IFREG | 0444},
    {"metrics", kFirstIno + 2, Kind::kMetrics, S_IFREG | 0444},
    {"drop_cache", kFirstIno + 3, Kind::kDropCache, S_IFREG | 0200},
    {"prefetch", kFirstIno + 4, Kind::kPrefetch, S_IFREG | 0200},
    {"sync", kFirstIno + 5, Kind::kSync, S_IFREG | 0200},
    {"evict", kFirstIno + 6, Kind::kEvict, S_IFREG | 0200},
}};
static_assert(kFirstIno + kFiles.size() == kLastIno);

constexpr Node kDir = {".kvfs", kDirIno, Kind::kDir, S_IFDIR | 0555};

const Node* NodeOf(fuse_ino_t ino) {
  if (ino == kDirIno) return &kDir;
  for (const Node& n : kFiles) {
    if (n.ino == ino) return &n;
  }
  return nullptr;
}

bool Readable(const Node& n) { return n.kind == Kind::kStats || n.kind == Kind::kMetrics; }

// The control files' times: when the daemon started (they have no history).
const timespec& StartTime() {
  static const timespec t = [] {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts;
  }();
  return t;
}

struct stat StatOf(const Node& n) {
  struct stat st;
  std::memset(&st, 0, sizeof(st));
  st.st_ino = n.ino;
  st.st_mode = n.mode;
  st.st_nlink = n.kind == Kind::kDir ? 2 : 1;
  st.st_uid = 0;
  st.st_gid = 0;
  // Size 0: content is made at open; the files are opened direct_io, so the
  // kernel reads until we return short rather than stopping at st_size.
  st.st_size = 0;
  st.st_blksize = 4096;
  st.st_atim = st.st_mtim = st.st_ctim = StartTime();
  return st;
}

// What permission checks see of a control node (root's, its mode).
fs::Attr AttrOf(const Node& n) {
  fs::Attr a;
  a.ino = n.ino;
  a.mode = n.mode;
  return a;
}

// What an open control file's handle holds.
struct OpenFile {
  std::string content;  // a readable file's content, fixed at open
  // `prefetch`: the start of a line whose end has not been written yet (a
  // list longer than one write request arrives in pieces cut anywhere).
  Mutex mu;
  std::string partial GUARDED_BY(mu);
  bool skipping GUARDED_BY(mu) = false;  // dropping the rest of an overlong line
};

// Open control files by handle. A Read and the Release of one handle can
// overlap: when a reader is killed mid-read the kernel releases the file
// while our reply may still be going out (ASan caught the use after free),
// so a Read holds its own reference.
class OpenFiles {
 public:
  uint64_t Add(std::shared_ptr<OpenFile> f) {
    MutexLock l(mu_);
    const uint64_t id = next_++;
    open_.emplace(id, std::move(f));
    return id;
  }
  std::shared_ptr<OpenFile> Get(uint64_t id) {
    MutexLock l(mu_);
    auto it = open_.find(id);
    return it == open_.end() ? nullptr : it->second;
  }
  void Remove(uint64_t id) {
    MutexLock l(mu_);
    open_.erase(id);
  }

 private:
  Mutex mu_;
  uint64_t next_ GUARDED_BY(mu_) = 1;
  std::unordered_map<uint64_t, std::shared_ptr<OpenFile>> open_ GUARDED_BY(mu_);
};

OpenFiles& Opened() {
  static OpenFiles* s = new OpenFiles;  // lives until exit: handlers may run late
  return *s;
}

// Prefetches the file `line` names (relative to the root; a trailing '\r'
// and leading '/' are ignored, an empty line names nothing).
Status PrefetchName(fs::FileSystem& fs, std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  while (!line.empty() && line.front() == '/') line.remove_prefix(1);
  if (line.empty()) return Status::OK();
  Status st = [&]() -> Status {
    KVFS_ASSIGN_OR_RETURN(uint64_t ino, fs.ResolvePath(line));
    return fs.Prefetch(ino);
  }();
  if (!st.ok()) spdlog::debug(".kvfs/prefetch: {}: {}", line, st.ToString());
  return st;
}

// A name longer than this is refused without waiting for its end.
constexpr size_t kMaxLine = PATH_MAX;

// Feeds one write of `prefetch` through `f`: the lines it completes are
// prefetched, an unfinished last line waits in f.partial for the next write
// or for close (`at_close`, which ends it). Tries every line; returns the
// last failure, ENAMETOOLONG for a line over kMaxLine (the rest of it is
// skipped).
Status PrefetchLines(fs::FileSystem& fs, OpenFile& f, std::string_view data, bool at_close) {
  MutexLock l(f.mu);
  Status result = Status::OK();
  const auto end_line = [&]() REQUIRES(f.mu) {
    if (!f.skipping) {
      Status st = PrefetchName(fs, f.partial);
      if (!st.ok()) result = st;
    }
    f.partial.clear();
    f.skipping = false;
  };
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    const std::string_view piece = data.substr(0, nl);
    data = nl == std::string_view::npos ? std::string_view() : data.substr(nl + 1);
    if (!f.skipping && f.partial.size() + piece.size() > kMaxLine) {
      f.partial.clear();
      f.skipping = true;
      result = Status::Error(ENAMETOOLONG, ".kvfs/prefetch: a line longer than " +
                                               std::to_string(kMaxLine) + " bytes");
    } else if (!f.skipping) {
      f.partial.append(piece);
    }
    if (nl == std::string_view::npos) break;  // the line goes on in the next write
    end_line();
  }
  if (at_close) end_line();
  return result;
}

// The percent one write of `evict` names: decimal digits for 0..100, then
// at most one '\n' (what `echo 50 >` sends). EINVAL for anything else.
Result<unsigned> EvictPercent(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  unsigned pct = 0;
  bool valid = !text.empty() && text.size() <= 3;
  for (char c : text) {
    valid = valid && c >= '0' && c <= '9';
    if (valid) pct = pct * 10 + static_cast<unsigned>(c - '0');
  }
  if (!valid || pct > 100) {
    return Status::Error(EINVAL, ".kvfs/evict: write a percent of the data space, 0 to 100");
  }
  return pct;
}

Status Evict(fs::FileSystem& fs, std::string_view text) {
  KVFS_ASSIGN_OR_RETURN(unsigned pct, EvictPercent(text));
  KVFS_ASSIGN_OR_RETURN(uint64_t files, fs.Evict(pct));
  spdlog::info(".kvfs/evict: {} files evicted to reach {}% used", files, pct);
  return Status::OK();
}

}  // namespace

Status RefuseNameChange(fuse_ino_t parent, const char* name, int exists_errno) {
  if (Owns(parent)) return Status::Error(EPERM, ".kvfs: the control directory is fixed");
  if (IsControlName(parent, name)) {
    return Status::Error(exists_errno, ".kvfs: reserved for the control directory");
  }
  return Status::OK();
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  SessionState& s = StateOf(req);
  const Node* found = nullptr;
  bool cacheable = true;
  if (IsControlName(parent, name)) {
    // Search permission on the root first, as for any name in it.
    Status may = perm::MayLookupControlDir(req, &cacheable);
    if (!may.ok()) {
      ReplyStatus(req, may, "lookup");
      return;
    }
    found = &kDir;
  } else if (std::strcmp(name, ".") == 0) {
    found = NodeOf(parent);  // export support: the inode of a file handle
  } else if (std::strcmp(name, "..") == 0 && parent == kDirIno) {
    // Export support reconnecting .kvfs: its parent is the root.
    Result<fs::Attr> r = NoThrow([&] { return s.fs->Lookup(FUSE_ROOT_ID, "."); });
    if (!r.ok()) {
      ReplyStatus(req, r.status(), "lookup");
      return;
    }
    fuse_entry_param e = EntryParam(*r, s.timeouts);
    fuse_reply_entry(req, &e);
    return;
  } else if (parent == kDirIno) {
    for (const Node& n : kFiles) {
      if (std::strcmp(n.name, name) == 0) found = &n;
    }
  }
  if (found == nullptr) {
    ReplyStatus(req, Status::Error(ENOENT, std::string(".kvfs: no entry ") + name), "lookup");
    return;
  }
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = found->ino;
  e.generation = 1;
  e.attr = StatOf(*found);
  e.attr_timeout = s.timeouts.attr_s;
  e.entry_timeout = cacheable ? s.timeouts.entry_s : 0;
  fuse_reply_entry(req, &e);
}

void Access(fuse_req_t req, fuse_ino_t ino, int mask) {
  const Node* n = NodeOf(ino);
  if (n == nullptr) {
    ReplyStatus(req, Status::Error(ENOENT, ".kvfs: no such inode"), "access");
    return;
  }
  int want = 0;
  if (mask & R_OK) want |= fs::kMayRead;
  if (mask & W_OK) want |= fs::kMayWrite;
  if (mask & X_OK) want |= fs::kMayExec;
  ReplyStatus(req, perm::Check(req, AttrOf(*n), want), "access");
}

void Forget(fuse_req_t req, fuse_ino_t /*ino*/, uint64_t /*nlookup*/) { fuse_reply_none(req); }

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  const Node* n = NodeOf(ino);
  if (n == nullptr) {
    ReplyStatus(req, Status::Error(ENOENT, ".kvfs: no such inode"), "getattr");
    return;
  }
  struct stat st = StatOf(*n);
  fuse_reply_attr(req, &st, StateOf(req).timeouts.attr_s);
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* /*attr*/, int to_set,
             fuse_file_info* /*fi*/) {
  const Node* n = NodeOf(ino);
  if (n == nullptr || n->kind == Kind::kDir) {
    ReplyStatus(req, Status::Error(EPERM, ".kvfs: attributes are fixed"), "setattr");
    return;
  }
  // Truncation (open O_TRUNC without atomic_o_trunc, `: > f`) and time
  // updates are harmless no-ops; ownership and mode are fixed.
  constexpr int kIgnored = FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
                           FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW |
                           FUSE_SET_ATTR_CTIME;
  if ((to_set & ~kIgnored) != 0) {
    ReplyStatus(req, Status::Error(EPERM, ".kvfs: mode and owner are fixed"), "setattr");
    return;
  }
  // truncate(2) asks for write permission, as the kernel's own check did.
  if (to_set & FUSE_SET_ATTR_SIZE) {
    Status st = perm::Check(req, AttrOf(*n), fs::kMayWrite);
    if (!st.ok()) {
      ReplyStatus(req, st, "setattr");
      return;
    }
  }
  struct stat st = StatOf(*n);
  fuse_reply_attr(req, &st, StateOf(req).timeouts.attr_s);
}

void Link(fuse_req_t req, fuse_ino_t /*ino*/, fuse_ino_t /*new_parent*/,
          const char* /*new_name*/) {
  ReplyStatus(req, Status::Error(EPERM, "link: hard links are not supported"), "link");
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  const Node* n = NodeOf(ino);
  if (n == nullptr || n->kind == Kind::kDir) {
    ReplyStatus(req, Status::Error(EISDIR, ".kvfs: not a file"), "open");
    return;
  }
  const int acc = fi->flags & O_ACCMODE;
  // Root passes the kernel's permission check for any mode bits, so the
  // direction of each file is enforced here.
  if (Readable(*n) ? acc != O_RDONLY : acc != O_WRONLY) {
    ReplyStatus(req, Status::Error(EACCES, std::string(".kvfs/") + n->name + ": wrong direction"),
                "open");
    return;
  }
  if (!Readable(*n) && fuse_req_ctx(req)->uid != 0) {
    ReplyStatus(req, Status::Error(EACCES, std::string(".kvfs/") + n->name + ": root only"),
                "open");
    return;
  }
  std::shared_ptr<OpenFile> file;
  Status st = NoThrowVoid([&] {
    if (n->kind == Kind::kPrefetch) file = std::make_shared<OpenFile>();
    if (!Readable(*n)) return;
    file = std::make_shared<OpenFile>();
    const fs::StatsSnapshot stats = s.fs->Stats();
    FrontEndStats front;
    if (s.uring != nullptr && s.uring->active()) {
      front.transport = s.uring->Describe();
      front.uring = true;
    }
    if (s.passthrough != nullptr) {
      front.passthrough = s.passthrough->Describe();
      front.passthrough_on = s.passthrough->active();
      front.passthrough_exports = s.passthrough->exports();
      front.passthrough_export_failures = s.passthrough->export_failures();
    }
    front.registrations = s.registry.Live();
    front.write_yields = s.read_priority.waits();
    front.write_yield_ns = s.read_priority.waited_ns();
    front.requests = RequestCounts();
    front.request_times = RequestTimings();
    file->content = n->kind == Kind::kStats ? StatsToJson(stats, front)
                                            : StatsToPrometheus(stats, front);
  });
  if (!st.ok()) {
    ReplyStatus(req, st, "open");
    return;
  }
  fi->fh = file ? Opened().Add(std::move(file)) : 0;
  fi->direct_io = 1;
  fi->keep_cache = 0;
  fi->nonseekable = 0;
  if (fuse_reply_open(req, fi) == -ENOENT && fi->fh != 0) {
    Opened().Remove(fi->fh);  // interrupted open(2): no release will come
  }
}

void Read(fuse_req_t req, fuse_ino_t /*ino*/, size_t size, off_t off, fuse_file_info* fi) {
  std::shared_ptr<const OpenFile> file = fi->fh ? Opened().Get(fi->fh) : nullptr;
  if (file == nullptr || off < 0) {
    ReplyStatus(req, Status::Error(EBADF, ".kvfs: not open for reading"), "read");
    return;
  }
  const std::string& c = file->content;
  size_t start = std::min(c.size(), static_cast<size_t>(off));
  size_t len = std::min(size, c.size() - start);
  fuse_reply_buf(req, c.data() + start, len);
}

void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t /*off*/,
           fuse_file_info* fi) {
  // Each may wait (a cache drop, a sync, an eviction): on a worker.
  if (!RequestLoop::MayWait()) return RequestLoop::HandOff(req);
  SessionState& s = StateOf(req);
  const Node* n = NodeOf(ino);
  Status st = Status::Error(EBADF, ".kvfs: not open for writing");
  if (n != nullptr) {
    switch (n->kind) {
      case Kind::kDropCache:
        st = NoThrow([&] { return s.fs->DropCache(); });
        break;
      case Kind::kSync:
        st = NoThrow([&] { return s.fs->Sync(); });
        break;
      case Kind::kEvict:
        st = NoThrow([&] { return Evict(*s.fs, std::string_view(buf, size)); });
        break;
      case Kind::kPrefetch:
        if (auto file = fi->fh ? Opened().Get(fi->fh) : nullptr) {
          st = NoThrow([&] {
            return PrefetchLines(*s.fs, *file, std::string_view(buf, size), /*at_close=*/false);
          });
        }
        break;
      default:
        break;
    }
  }
  if (!st.ok()) {
    ReplyStatus(req, st, "write");
    return;
  }
  fuse_reply_write(req, size);
}

void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const Node* n = NodeOf(ino);
  auto file = fi->fh ? Opened().Get(fi->fh) : nullptr;
  Status st = Status::OK();
  if (n != nullptr && n->kind == Kind::kPrefetch && file != nullptr) {
    st = NoThrow([&] { return PrefetchLines(*StateOf(req).fs, *file, {}, /*at_close=*/true); });
  }
  ReplyStatus(req, st, "flush");
}

void Release(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  if (fi->fh != 0) Opened().Remove(fi->fh);
  fuse_reply_err(req, 0);
}

void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (ino != kDirIno) {
    ReplyStatus(req, Status::Error(ENOTDIR, ".kvfs: not a directory"), "opendir");
    return;
  }
  fi->fh = 0;  // the listing is fixed: nothing to hold
  fuse_reply_open(req, fi);
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* /*fi*/) {
  if (ino != kDirIno) {
    ReplyStatus(req, Status::Error(ENOTDIR, ".kvfs: not a directory"), "readdir");
    return;
  }
  std::string buf;
  Status st = NoThrowVoid([&] {
    buf.resize(size);
    size_t used = 0;
    // Offsets: 1 after ".", 2 after "..", 3.. after each file.
    for (size_t i = static_cast<size_t>(std::max<off_t>(off, 0)); i < kFiles.size() + 2; ++i) {
      struct stat st;
      std::memset(&st, 0, sizeof(st));
      const char* name;
      if (i == 0) {
        name = ".";
        st.st_ino = kDirIno;
        st.st_mode = S_IFDIR;
      } else if (i == 1) {
        name = "..";
        st.st_ino = FUSE_ROOT_ID;
        st.st_mode = S_IFDIR;
      } else {
        name = kFiles[i - 2].name;
        st.st_ino = kFiles[i - 2].ino;
        st.st_mode = kFiles[i - 2].mode;
      }
      size_t need = fuse_add_direntry(req, nullptr, 0, name, nullptr, 0);
      if (used + need > size) break;
      fuse_add_direntry(req, buf.data() + used, size - used, name, &st,
                        static_cast<off_t>(i + 1));
      used += need;
    }
    buf.resize(used);
  });
  if (!st.ok()) {
    ReplyStatus(req, st, "readdir");
    return;
  }
  fuse_reply_buf(req, buf.data(), buf.size());
}

void ListXattr(fuse_req_t req, fuse_ino_t /*ino*/, size_t size) {
  // An empty list: its size when asked for the size, else no bytes.
  if (size == 0) {
    fuse_reply_xattr(req, 0);
  } else {
    fuse_reply_buf(req, nullptr, 0);
  }
}

}  // namespace kvfs::fuse::control
