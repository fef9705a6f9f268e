#include "fuse/reply.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace kvfs::fuse {

namespace {

// Errors that are ordinary answers (a missing name, a full volume) rather
// than signs of trouble; they are logged only at debug level.
bool IsExpected(int code) {
  switch (code) {
    case ENOENT: case EEXIST: case ENOTEMPTY: case ENOTDIR: case EISDIR: case ENOSPC:
    case ENAMETOOLONG: case EPERM: case EACCES: case EOPNOTSUPP: case ENODATA:
    case ENOTTY: case EINVAL: case EXDEV: case EBADF: case EFBIG: case ERANGE:
    case EROFS:  // after the index failed a write, which was logged once as an error
    // What a client's own mistakes earn (a batch of the wrong ABI version,
    // too many entries, offsets outside its memory, a buffer it changed
    // while it was being written), a race of its own (ESTALE) or its giving
    // up: at warning level, any user could fill the log.
    case EPROTO: case E2BIG: case EFAULT: case EBUSY: case ESTALE: case EINTR:
      return true;
    default:
      return false;
  }
}

timespec ToTimespec(int64_t ns) {
  timespec ts{};
  ts.tv_sec = ns / 1'000'000'000;
  ts.tv_nsec = ns % 1'000'000'000;
  if (ts.tv_nsec < 0) {  // times before 1970
    ts.tv_nsec += 1'000'000'000;
    ts.tv_sec -= 1;
  }
  return ts;
}

}  // namespace

int ReplyStatus(fuse_req_t req, const Status& st, const char* op) {
  if (!st.ok()) {
    if (IsExpected(st.code())) {
      spdlog::debug("{}: {}", op, st.ToString());
    } else {
      spdlog::warn("{}: {}", op, st.ToString());
    }
  }
  return fuse_reply_err(req, st.code());
}

struct stat ToStat(const fs::Attr& a) {
  struct stat st;
  std::memset(&st, 0, sizeof(st));
  st.st_ino = a.ino;
  st.st_mode = a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blocks = static_cast<blkcnt_t>(a.blocks);
  st.st_blksize = 4096;
  st.st_atim = ToTimespec(a.atime_ns);
  st.st_mtim = ToTimespec(a.mtime_ns);
  st.st_ctim = ToTimespec(a.ctime_ns);
  return st;
}

fuse_entry_param EntryParam(const fs::Attr& attr, const CacheTimeouts& t) {
  fuse_entry_param e;
  std::memset(&e, 0, sizeof(e));
  e.ino = attr.ino;
  e.generation = attr.generation;
  e.attr = ToStat(attr);
  e.attr_timeout = t.attr_s;
  e.entry_timeout = t.entry_s;
  return e;
}

struct statvfs ToStatvfs(const fs::FsStats& s) {
  struct statvfs v;
  std::memset(&v, 0, sizeof(v));
  v.f_bsize = s.block_size;
  v.f_frsize = s.block_size;
  v.f_blocks = s.total_blocks;
  v.f_bfree = s.free_blocks;
  v.f_bavail = s.free_blocks;  // nothing is reserved for root
  v.f_files = s.files + s.free_files;
  v.f_ffree = s.free_files;
  v.f_favail = s.free_files;
  v.f_namemax = s.name_max;
  return v;
}

fs::Caller CallerOf(fuse_req_t req, bool with_groups) {
  const fuse_ctx* c = fuse_req_ctx(req);
  fs::Caller caller{c->uid, c->gid, c->pid, {}, {}};
  if (!with_groups) return caller;
  std::vector<gid_t> groups(32);
  for (;;) {
    int n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
    if (n < 0) break;  // unknown: only the primary gid counts
    if (static_cast<size_t>(n) <= groups.size()) {
      caller.groups.assign(groups.begin(), groups.begin() + n);
      break;
    }
    groups.resize(static_cast<size_t>(n));
  }
  return caller;
}

fs::KillPriv* UnprivilegedCaller(fuse_req_t req, fs::KillPriv* out) {
  if (fuse_req_ctx(req)->uid == 0) return nullptr;
  out->in_group = [req](uint32_t gid) noexcept {
    if (fuse_req_ctx(req)->gid == gid) return true;
    try {
      const fs::Caller c = CallerOf(req, /*with_groups=*/true);
      return std::find(c.groups.begin(), c.groups.end(), gid) != c.groups.end();
    } catch (const std::bad_alloc&) {
      return false;  // unknown: as outside the group (the bit goes, as it may)
    }
  };
  return out;
}

void InvalidateAttrs(fuse_req_t req, fuse_ino_t ino) {
  fuse_session* se = StateOf(req).session;
  if (se == nullptr) return;
  // Offset < 0: attributes only, no page cache (kvfs's data has none).
  int rc = fuse_lowlevel_notify_inval_inode(se, ino, -1, 0);
  if (rc != 0 && rc != -ENOENT) {
    spdlog::warn("telling the kernel inode {}'s mode changed: {}", ino, std::strerror(-rc));
  }
}

// --- PendingReplies

void PendingReplies::Add() {
  MutexLock l(mu_);
  ++count_;
}

void PendingReplies::Done() {
  MutexLock l(mu_);
  if (--count_ == 0) zero_.NotifyAll();
}

void PendingReplies::WaitNone() {
  MutexLock l(mu_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (count_ != 0) {
    if (zero_.WaitUntil(l, deadline)) continue;
    spdlog::warn("waiting for {} request(s) still being served before unmounting", count_);
    deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  }
}

// --- AsyncReply

std::shared_ptr<AsyncReply> AsyncReply::Start(fuse_req_t req, const char* op,
                                              OnInterrupt on_interrupt) {
  SessionState& state = StateOf(req);
  std::shared_ptr<AsyncReply> r(new AsyncReply(req, op, state));
  if (on_interrupt != OnInterrupt::kIgnore) r->cancel_ = std::make_shared<std::atomic<bool>>(false);
  // Armed only after every allocation succeeded: if one threw, the request
  // is still the handler's to answer (ENOMEM) and nothing was counted.
  state.pending.Add();
  r->armed_ = true;
  if (r->cancel_) {
    std::weak_ptr<AsyncReply> answer;
    if (on_interrupt == OnInterrupt::kAnswer) answer = r;
    state.interrupts.Watch(req, r->cancel_, std::move(answer));
  }
  return r;
}

bool AsyncReply::Claim() {
  if (claimed_.exchange(true, std::memory_order_acq_rel)) return false;
  if (cancel_) state_.interrupts.Forget(req_);
  return true;
}

AsyncReply::~AsyncReply() {
  if (!armed_) return;
  if (Claim()) {
    spdlog::error("{}: request completed without a reply from the file system; replying EIO",
                  op_);
    fuse_reply_err(req_, EIO);
  }
  state_.pending.Done();
}

// --- Interrupts

namespace {

// Set while Watch() registers a request: libfuse runs the interrupt
// callback at once if the interrupt came first, holding the request's lock
// and no reference of its own, so a reply there could free the request
// under it. Watch() answers such an interrupt itself, after registering.
thread_local bool t_in_watch = false;
thread_local bool t_interrupted_in_watch = false;

}  // namespace

void Interrupts::Watch(fuse_req_t req, std::shared_ptr<std::atomic<bool>> flag,
                       std::weak_ptr<AsyncReply> answer) {
  {
    MutexLock l(mu_);
    flags_[req] = Watched{std::move(flag), answer};
  }
  // Runs OnInterrupt at once if the interrupt came first; so not under mu_.
  t_in_watch = true;
  t_interrupted_in_watch = false;
  fuse_req_interrupt_func(req, &Interrupts::OnInterrupt, this);
  t_in_watch = false;
  if (t_interrupted_in_watch) AnswerInterrupted(answer);
}

void Interrupts::Forget(fuse_req_t req) {
  MutexLock l(mu_);
  flags_.erase(req);
}

void Interrupts::AnswerInterrupted(const std::weak_ptr<AsyncReply>& answer) {
  std::shared_ptr<AsyncReply> r = answer.lock();
  if (r && r->Claim()) fuse_reply_err(r->req(), EINTR);
}

void Interrupts::OnInterrupt(fuse_req_t req, void* self) {
  // libfuse holds a reference to `req` during this call (but in Watch(),
  // see t_in_watch), so its address is not reused by another request
  // meanwhile.
  auto* in = static_cast<Interrupts*>(self);
  Watched w;
  {
    MutexLock l(in->mu_);
    auto it = in->flags_.find(req);
    if (it == in->flags_.end()) return;
    w = it->second;
  }
  // Not under mu_: a read whose queued commands are dropped replies (and
  // so Forgets) from the scheduler's thread.
  Status st = NoThrowVoid([&] { StateOf(req).fs->CancelReads(w.flag); });
  if (!st.ok()) w.flag->store(true, std::memory_order_relaxed);  // dropped at dispatch instead
  if (t_in_watch) {
    t_interrupted_in_watch = true;
  } else {
    AnswerInterrupted(w.answer);
  }
}

}  // namespace kvfs::fuse
