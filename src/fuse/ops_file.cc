// Regular files: create, open, read, write, flush, release, fsync,
// fallocate.
//
// Buffered opens of data files get FOPEN_DIRECT_IO: every read() and
// write() of the application reaches us (no kernel page cache for chunk
// data; kvfs's own cache is the cache), in requests of up to
// max_write/max_read, sent one after the other. O_DIRECT opens do not: the
// kernel's own direct I/O path (FUSE_CAP_ASYNC_DIO) sends a large read or
// write as all its requests at once, so a serial connector's 4 MiB load is
// four requests served in parallel rather than four round trips. Neither
// uses the page cache, and the kernel imposes no alignment of its own.
// (The kernel never interrupts those parallel requests: a signal waits for
// them.)
#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <span>

#include "fs/file_memory.h"
#include "fuse/passthrough.h"
#include "fuse/ops.h"
#include "fuse/permissions.h"
#include "fuse/reply.h"
#include "fuse/request_loop.h"
#include "fuse/tmpfile.h"

namespace kvfs::fuse::ops {

namespace {

void SetOpenFlags(fuse_file_info* fi, uint64_t fh) {
  fi->fh = fh;
  fi->direct_io = (fi->flags & O_DIRECT) == 0;
  fi->keep_cache = 0;
  // close(2) of a read-only handle has nothing to flush (fs::Flush returns
  // at once): FOPEN_NOFLUSH spares a load loop that FUSE round trip per key.
  fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY;
}

// Setuid/setgid on a write, O_TRUNC open or fallocate: fs/ clears them
// for an unprivileged caller (fs/killpriv.h). The kernel asks for it
// (FUSE_WRITE_KILL_SUIDGID, FUSE_OPEN_KILL_SUIDGID) when the caller lacks
// CAP_FSETID, but libfuse 3.14 passes neither flag to the handlers
// (do_write keeps only FUSE_WRITE_CACHE, do_open only the open flags); uid
// 0 stands for CAP_FSETID, as for a local filesystem's root
// (UnprivilegedCaller). When kvfs cleared a bit, the kernel's cached mode
// is stale: it is told (these replies carry no attributes).

// Opens the kernel may serve from the file's memory (fuse/passthrough.h):
// a read-only open of a cached file, or any open of a file already served
// that way. The reply comes when the file's load (if one is running) ends.
void OpenServed(fuse_req_t req, fuse_ino_t ino, int flags, const fs::Caller* check) {
  SessionState& s = StateOf(req);
  std::shared_ptr<AsyncReply> reply;
  try {
    // An open that waits for the file's load is answered EINTR at once if
    // its caller gets a signal (the kernel waits for the answer).
    reply = AsyncReply::Start(req, "open", AsyncReply::OnInterrupt::kAnswer);
    Passthrough* pt = s.passthrough;
    fs::FileSystem* fs = s.fs;
    // An unprivileged O_TRUNC open clears setuid/setgid; `who` lives until
    // done has run (fs/ may ask it on an engine thread).
    auto who = std::make_shared<fs::KillPriv>();
    fs::KillPriv* kill = UnprivilegedCaller(req, who.get());
    fs->OpenServed(
        ino, flags, kill, [pt](fs::FileMemory& m) { return pt->Export(m); },
        [reply, pt, fs, flags, who, ino](Result<fs::FileSystem::Opened> r) {
          if (!reply->Claim()) {
            if (r.ok()) fs->Release(r->fh);  // may wait: an engine thread
            return;
          }
          if (!r.ok()) {
            ReplyStatus(reply->req(), r.status(), "open");
            return;
          }
          if (who->mode_changed) InvalidateAttrs(reply->req(), ino);
          int rc;
          if (r->memory) {
            rc = pt->ReplyOpen(reply->req(), r->fh, *r->memory, flags);
          } else {
            fuse_file_info fi{};
            fi.flags = flags;
            SetOpenFlags(&fi, r->fh);
            rc = fuse_reply_open(reply->req(), &fi);
          }
          if (rc == -ENOENT) {
            // Interrupted open(2): no release will come for this handle.
            Status st = NoThrowVoid([&] { fs->Release(r->fh); });
            if (!st.ok()) spdlog::error("open: undoing an interrupted open: {}", st.ToString());
          }
        },
        check);
  } catch (const std::bad_alloc&) {
    if (!reply || reply->Claim()) fuse_reply_err(req, ENOMEM);
  }
}

}  // namespace

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  // fs/ checks the caller's permission to add a name to `parent`, and says
  // whether names in it may be cached (fuse/permissions.h).
  perm::RequestCaller who(req);
  bool cacheable = true;
  bool* everyone_searches = who.check() ? &cacheable : nullptr;
  // O_TMPFILE arrives as a create of kTmpfileName (fuse/tmpfile.h): a file
  // with no name, until a link names it.
  Result<fs::FileSystem::Created> r = NoThrow([&] {
    return IsTmpfileName(name)
               ? s.fs->CreateUnnamed(parent, mode, fi->flags, who.caller(), who.check(),
                                     everyone_searches)
               : s.fs->Create(parent, name, mode, fi->flags, who.caller(), who.check(),
                              everyone_searches);
  });
  if (!r.ok()) {
    ReplyStatus(req, r.status(), "create");
    return;
  }
  SetOpenFlags(fi, r->fh);
  fuse_entry_param e = EntryParam(r->attr, s.timeouts);
  if (!cacheable) e.entry_timeout = 0;  // fuse/permissions.h
  if (fuse_reply_create(req, &e, fi) == -ENOENT) {
    // The open(2) was interrupted: the kernel will never use or release this
    // handle, nor count the lookup reference. The file itself stays created.
    Status st = NoThrowVoid([&] {
      s.fs->Release(r->fh);
      s.fs->Forget(r->attr.ino, 1);
    });
    if (!st.ok()) spdlog::error("create: undoing an interrupted open: {}", st.ToString());
  }
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  // fs/ checks the caller's permission to open as the flags ask.
  perm::RequestCaller caller(req);
  if (s.passthrough != nullptr && s.passthrough->active()) {
    OpenServed(req, ino, fi->flags, caller.check());
    return;
  }
  // An unprivileged O_TRUNC open clears setuid/setgid.
  fs::KillPriv who;
  fs::KillPriv* kill = UnprivilegedCaller(req, &who);
  Result<uint64_t> r =
      NoThrow([&] { return s.fs->Open(ino, fi->flags, kill, caller.check()); });
  if (!r.ok()) {
    ReplyStatus(req, r.status(), "open");
    return;
  }
  if (who.mode_changed) InvalidateAttrs(req, ino);
  SetOpenFlags(fi, *r);
  if (fuse_reply_open(req, fi) == -ENOENT) {
    // Interrupted open(2): no release will come for this handle.
    Status st = NoThrowVoid([&] { s.fs->Release(*r); });
    if (!st.ok()) spdlog::error("open: undoing an interrupted open: {}", st.ToString());
  }
}

void Read(fuse_req_t req, fuse_ino_t /*ino*/, size_t size, off_t off, fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  // The reply comes from the completion callback: this worker thread goes
  // back to the kernel for the next request instead of waiting on the device.
  std::shared_ptr<AsyncReply> reply;
  try {
    reply = AsyncReply::Start(req, "read", AsyncReply::OnInterrupt::kCancel);
    // Other callers' writes wait until this read has its reply. Ended
    // before the reply is let go (members go in reverse order), also if
    // the callback were dropped unanswered: the reply's end may end the
    // session that holds read_priority.
    struct Call {
      Call(std::shared_ptr<AsyncReply> r, ReadPriority& p, pid_t pid)
          : reply(std::move(r)), reading(p, pid) {}
      std::shared_ptr<AsyncReply> reply;
      ReadPriority::Reading reading;
    };
    auto call = std::make_shared<Call>(reply, s.read_priority, fuse_req_ctx(req)->pid);
    s.fs->Read(
        fi->fh, static_cast<uint64_t>(off), size,
        [call](Status st, std::span<const char> data) {
          const std::shared_ptr<AsyncReply>& reply = call->reply;
          if (reply->Claim()) {
            if (st.code() == ECANCELED) {
              // Interrupted: the kernel expects EINTR for a request it gave up.
              fuse_reply_err(reply->req(), EINTR);
            } else if (!st.ok()) {
              ReplyStatus(reply->req(), st, "read");
            } else {
              fuse_reply_buf(reply->req(), data.data(), data.size());
            }
          }
          call->reading.End();
        },
        reply->cancel_flag());
  } catch (const std::bad_alloc&) {
    if (!reply || reply->Claim()) fuse_reply_err(req, ENOMEM);
  }
}

void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
           fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  const bool may_wait = RequestLoop::MayWait();
  const pid_t pid = fuse_req_ctx(req)->pid;
  // Another caller's reads go first (fuse/read_priority.h): a write that
  // would wait for them waits on a worker. One run on the receiver because
  // no worker could take it goes ahead.
  if (!may_wait && s.read_priority.WriteWouldWait(pid)) return RequestLoop::HandOff(req);
  if (!RequestLoop::OnReceiver()) s.read_priority.BeforeWrite(pid);
  fs::KillPriv who;
  fs::KillPriv* kill = UnprivilegedCaller(req, &who);
  Result<size_t> r = NoThrow([&] {
    return s.fs->Write(fi->fh, static_cast<uint64_t>(off), std::span<const char>(buf, size),
                       kill, may_wait);
  });
  if (!may_wait && r.status().code() == fs::kWouldWait) return RequestLoop::HandOff(req);
  if (who.mode_changed) InvalidateAttrs(req, ino);
  if (!r.ok()) {
    ReplyStatus(req, r.status(), "write");
    return;
  }
  fuse_reply_write(req, *r);
}

void Flush(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  const bool may_wait = RequestLoop::MayWait();
  Status st = NoThrow([&] { return s.fs->Flush(fi->fh, may_wait); });
  if (!may_wait && st.code() == fs::kWouldWait) return RequestLoop::HandOff(req);
  ReplyStatus(req, st, "flush");
}

void Release(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  bool ran = true;
  Status st = NoThrowVoid([&] {
    s.registry.DropOwner(OwnerFile{fi->fh, /*dir=*/false});  // the ioctl fd's last close
    ran = s.fs->Release(fi->fh, RequestLoop::MayWait());
  });
  if (!ran) return RequestLoop::HandOff(req);
  if (!st.ok()) spdlog::error("release of handle {}: {}", fi->fh, st.ToString());
  fuse_reply_err(req, 0);  // the kernel ignores release errors
}

void Fsync(fuse_req_t req, fuse_ino_t /*ino*/, int datasync, fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  std::shared_ptr<AsyncReply> reply;
  try {
    // Waits for write-behind and a commit: answered EINTR at once if its
    // caller gets a signal (the data still goes out, in order).
    reply = AsyncReply::Start(req, "fsync", AsyncReply::OnInterrupt::kAnswer);
    const bool ran = s.fs->Fsync(
        fi->fh, datasync != 0,
        [reply](Status st) {
          if (reply->Claim()) ReplyStatus(reply->req(), st, "fsync");
        },
        RequestLoop::MayWait());
    if (!ran && reply->Claim()) RequestLoop::HandOff(reply->req());
  } catch (const std::bad_alloc&) {
    if (!reply || reply->Claim()) fuse_reply_err(req, ENOMEM);
  }
}

void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
               fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  if (offset < 0 || length <= 0) {
    ReplyStatus(req, Status::Error(EINVAL, "fallocate: bad offset or length"), "fallocate");
    return;
  }
  fs::KillPriv who;
  fs::KillPriv* kill = UnprivilegedCaller(req, &who);
  Status st = NoThrow([&] {
    return s.fs->Fallocate(fi->fh, mode, static_cast<uint64_t>(offset),
                           static_cast<uint64_t>(length), kill);
  });
  if (who.mode_changed) InvalidateAttrs(req, ino);
  ReplyStatus(req, st, "fallocate");
}

}  // namespace kvfs::fuse::ops
