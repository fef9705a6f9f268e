#include "fuse/daemon.h"

#include <algorithm>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/mutex.h"
#include "fuse/control.h"
#include "fuse/permissions.h"
#include "fuse/request_loop.h"
#include "fuse/route.h"

namespace kvfs::fuse {

namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

// --- libfuse's messages (see daemon.h).
//
// libfuse may build one line from several calls, so text is gathered up to
// each newline.
Mutex g_log_mu;
std::string g_line GUARDED_BY(g_log_mu);
std::string* g_capture GUARDED_BY(g_log_mu) = nullptr;

void LibfuseLog(enum fuse_log_level level, const char* fmt, va_list ap) {
  if (level == FUSE_LOG_DEBUG) {  // -d output, as libfuse writes it
    std::vfprintf(stderr, fmt, ap);
    return;
  }
  char buf[1024];
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  MutexLock l(g_log_mu);
  g_line += buf;
  size_t nl;
  while ((nl = g_line.find('\n')) != std::string::npos) {
    std::string line = g_line.substr(0, nl);
    g_line.erase(0, nl + 1);
    if (line.empty()) continue;
    if (g_capture != nullptr) {
      if (!g_capture->empty()) *g_capture += "; ";
      *g_capture += line;
    } else if (level <= FUSE_LOG_ERR) {
      spdlog::error("libfuse: {}", line);
    } else {
      spdlog::info("libfuse: {}", line);
    }
  }
}

void InstallLibfuseLog() { fuse_set_log_func(LibfuseLog); }

// While alive, libfuse's messages are collected instead of logged.
class CapturedLibfuseLog {
 public:
  CapturedLibfuseLog() {
    MutexLock l(g_log_mu);
    g_capture = &text_;
  }
  ~CapturedLibfuseLog() {
    MutexLock l(g_log_mu);
    g_capture = nullptr;
  }
  // What libfuse said, or `fallback` if nothing.
  std::string Take(const std::string& fallback) {
    MutexLock l(g_log_mu);
    if (!g_line.empty()) {  // a message without its newline
      if (!text_.empty()) text_ += "; ";
      text_ += g_line;
      g_line.clear();
    }
    return text_.empty() ? fallback : fallback + ": " + text_;
  }

 private:
  std::string text_;
};

// The connection's parameters, negotiated with the kernel in FUSE_INIT.
void Init(void* userdata, fuse_conn_info* conn) {
  // 1 MiB requests. libfuse derives max_pages (FUSE_MAX_PAGES, kernels
  // >= 4.20) from max_write: (max_write - 1) / page + 1 = 256 pages; its
  // receive buffer holds 256 pages, so it clamps max_write to that. Reads
  // are bounded by the same max_pages and by max_read, which must equal the
  // max_read mount option (Mount::Create passes it). The io_uring
  // transport may raise both past 1 MiB in its INIT reply
  // (max_request_mb).
  conn->max_write = kMaxRequestBytes;
  conn->max_read = static_cast<SessionState*>(userdata)->max_read;
  // Enough background requests (async direct I/O pieces of large reads and
  // writes) in flight to keep the device queues full.
  conn->max_background = 128;
  conn->congestion_threshold = 96;
  conn->time_gran = 1;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  // A large direct read or write goes out as several 1 MiB requests at once.
  if (conn->capable & FUSE_CAP_ASYNC_DIO) conn->want |= FUSE_CAP_ASYNC_DIO;
  // open(O_TRUNC) arrives as one open with O_TRUNC, not open + setattr.
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  // File handles (name_to_handle_at, NFS): the kernel finds an inode it
  // no longer caches by LOOKUP of "." in it, a directory's parent by "..";
  // inode numbers and generations are the index's, stable across mounts.
  if (conn->capable & FUSE_CAP_EXPORT_SUPPORT) conn->want |= FUSE_CAP_EXPORT_SUPPORT;
  // Chunk data bypasses the page cache (direct_io); never cache writes.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Without HANDLE_KILLPRIV the kernel sends chown and truncate with the mode
  // it computed; kvfs clears setuid/setgid itself on a write and an O_TRUNC
  // open by a user other than root (ops_file.cc).
  conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
  // Request buffers move between threads (fuse/request_loop.h); a spliced
  // request would stay in the receiving thread's pipe.
  conn->want &= ~FUSE_CAP_SPLICE_READ;
  // Locks stay local to the kernel; there is one kernel per volume.
  conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS);
  spdlog::info("FUSE protocol {}.{}; max_write {} KiB, max_read {} KiB, max_background {}",
               conn->proto_major, conn->proto_minor, conn->max_write >> 10, conn->max_read >> 10,
               conn->max_background);
}

}  // namespace

fuse_lowlevel_ops Operations() {
  fuse_lowlevel_ops op;
  std::memset(&op, 0, sizeof(op));
  op.init = Init;
  SetHandlers(op);
  return op;
}

void BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Result<std::unique_ptr<Mount>> Mount::Create(const MountOptions& options, fuse_args* args) {
  if (options.transport == Transport::kUring) {
    Status st = UringAvailable();
    if (!st.ok()) return Status::Error(st.code(), "transport=uring: " + st.context());
  }
  std::unique_ptr<Mount> m(new Mount());
  m->options_ = options;
  m->state_ = std::make_unique<SessionState>(options.timeouts, options.max_threads);
  m->passthrough_ = std::make_unique<Passthrough>(options.passthrough);
  m->state_->passthrough = m->passthrough_.get();

  // kvfs checks mode bits itself (fuse/permissions.h) where the kernel can
  // drop its cached names at once; default_permissions would cost a store
  // two GETATTRs of its directory. max_read must match what Init() asks
  // for, or libfuse refuses the connection.
  if (options.transport != Transport::kDev) {
    m->state_->max_read = std::max(kMaxRequestBytes, options.max_request);
  }
  m->state_->kvfs_permissions = !options.kernel_permissions && perm::KernelCanDropAllNames();
  std::string kernel_opts = "-omax_read=" + std::to_string(m->state_->max_read);
  if (!m->state_->kvfs_permissions) kernel_opts += ",default_permissions";
  // Root mounts serve everyone (connectors often run as another user);
  // the mode bits still decide who may do what.
  if (geteuid() == 0) kernel_opts += ",allow_other";
  if (fuse_opt_add_arg(args, kernel_opts.c_str()) != 0) {
    return Status::Error(ENOMEM, "fuse_opt_add_arg");
  }

  InstallLibfuseLog();
  const fuse_lowlevel_ops op = Operations();
  CapturedLibfuseLog log;
  m->se_ = fuse_session_new(args, &op, sizeof(op), m->state_.get());
  if (m->se_ == nullptr) return Status::Error(EINVAL, log.Take("bad FUSE options"));
  m->state_->session = m->se_;
  // A client that goes away must not kill the daemon with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  return m;
}

Status Mount::MountAt(fs::FileSystem& fs, const std::string& mountpoint) {
  state_->fs = &fs;
  CapturedLibfuseLog log;
  if (fuse_session_mount(se_, mountpoint.c_str()) != 0) {
    return Status::Error(EIO, log.Take("cannot mount at " + mountpoint));
  }
  mounted_ = true;
  guard_ = CrashGuard::Start(mountpoint);
  notifier_ = EvictNotifier::Install(fs, se_);
  Status uring = Status::Error(EOPNOTSUPP, "transport=dev");
  if (options_.transport != Transport::kDev) {
    uring = UringAvailable();
    if (!uring.ok() && options_.transport == Transport::kAuto) {
      spdlog::info("FUSE transport: /dev/fuse ({})", uring.context());
    }
  }
  if (!uring.ok()) {
    // INIT is still to come: passthrough sees it through hooks of its own.
    if (passthrough_->may_activate()) return passthrough_->InstallHooks(se_);
    spdlog::info("passthrough: {}", passthrough_->Describe());
    return Status::OK();
  }
  UringTransport::Options uo;
  uo.required = options_.transport == Transport::kUring;
  uo.entries_per_queue = options_.uring_entries;
  uo.max_request = options_.max_request;
  // No spin on the queues: a request comes to the queue of the CPU its
  // caller runs on, so a spinning queue thread only takes the CPU that
  // caller needs to make its next request (docs/budget.md: cold stat storms
  // 1.5-2x faster without it, half the daemon CPU per stat). spin_us is the
  // /dev/fuse receiver's.
  uo.spin = std::chrono::microseconds(0);
  uo.passthrough = passthrough_.get();
  auto t = UringTransport::Install(se_, uo);
  if (!t.ok()) return t.status();
  uring_ = std::move(*t);
  state_->uring = uring_.get();
  return Status::OK();
}

Mount::~Mount() {
  if (se_ == nullptr) return;
  if (notifier_ && !notifier_->Stop(std::chrono::seconds(2))) {
    // A notification blocks in the kernel behind a request nobody serves
    // now: freeing the session under it would be a use after free. The
    // process is ending; its exit closes the fd and ends the call.
    spdlog::warn("eviction: a kernel notification is still blocked; leaving the session open");
    // What the blocked call may still touch when it returns stays too, and
    // the guard ends the connection when this thread exits.
    (void)state_.release();
    (void)uring_.release();
    guard_.Leave();
    return;
  }
  if (mounted_) fuse_session_unmount(se_);
  passthrough_->Detach();  // the kernel drops every backing id with the fd
  fuse_session_destroy(se_);
  guard_.Disarm();
}

Status Mount::Run() {
  RequestLoop loop(se_, options_.max_threads, std::chrono::microseconds(options_.spin_us));
  if (uring_) uring_->Attach(&loop);
  int rc = loop.Run(TerminationSignals());
  // The ring's requests are replied to and committed, and the rings closed
  // (so that closing /dev/fuse ends the connection).
  if (uring_) uring_->Stop();

  // Reads and fsyncs in flight reply from fs/ callbacks; the session must
  // live until they have.
  state_->pending.WaitNone();

  if (rc > 0) {
    spdlog::info("signal {} ({}): unmounting", rc, strsignal(rc));
    return Status::OK();
  }
  if (rc < 0) return Status::Error(-rc, "FUSE request loop");
  return Status::OK();
}

}  // namespace kvfs::fuse
