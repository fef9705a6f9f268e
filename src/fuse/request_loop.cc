#include "fuse/request_loop.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include <spdlog/spdlog.h>

#include "fuse/op_counters.h"
#include "fuse/opcodes.h"
#include "fuse/tmpfile.h"
#include "kvfs/ioctl.h"

namespace kvfs::fuse {

namespace {

// Reads up to this size run on the receiver. A larger one is copied from the
// cache into the caller's pages by the thread that replies (~100 us per MiB),
// and the kernel sends the 1 MiB pieces of a large read at once: workers
// copy them in parallel.
constexpr uint32_t kMaxReceiverRead = 256 << 10;

// A dispatched request up to this size is copied out of the receive buffer.
constexpr size_t kSmallRequest = 64 << 10;
// Large requests (writes) queued for workers, at most; beyond, the receiver
// runs them.
constexpr size_t kMaxQueuedLarge = 16;
// Receive buffers kept for reuse.
constexpr size_t kSpareBuffers = 4;

// The request's body after its header, or null if the request is too short
// to hold one (libfuse rejects it).
template <typename Body>
const Body* BodyOf(const fuse_buf& buf) {
  if (buf.size < sizeof(fuse_in_header) + sizeof(Body)) return nullptr;
  return reinterpret_cast<const Body*>(static_cast<const fuse_in_header*>(buf.mem) + 1);
}

bool IsInit(const fuse_buf& buf) {
  return buf.size >= sizeof(fuse_in_header) &&
         static_cast<const fuse_in_header*>(buf.mem)->opcode == FUSE_INIT;
}

}  // namespace

// Where a request runs: fuse/opcodes.h, the rules of its fs/ call
// (fs/calls.h), and two copy limits of the transport's own.
bool RequestLoop::RunsInReceiver(const fuse_buf& buf, bool backlog) const {
  if (buf.size < sizeof(fuse_in_header)) return true;  // libfuse rejects it
  const auto* in = static_cast<const fuse_in_header*>(buf.mem);
  const OpcodeRule* rule = OpcodeRuleOf(in->opcode);
  if (rule == nullptr) return false;
  switch (rule->admit) {
    case Admit::kAtOnce:
      return true;
    case Admit::kIoctl: {
      const auto* ioctl = BodyOf<fuse_ioctl_in>(buf);
      return ioctl == nullptr || _IOC_TYPE(ioctl->cmd) != KVFS_IOC_MAGIC;
    }
    case Admit::kByCall:
      break;
  }
  switch (fs::RulesOf(*rule->call).wait) {
    case fs::Wait::kMay:
      return false;
    case fs::Wait::kNever:
      if (in->opcode == FUSE_READ) {
        const auto* read = BodyOf<fuse_read_in>(buf);
        return read == nullptr || read->size <= kMaxReceiverRead;
      }
      return true;
    case fs::Wait::kAsk:
      break;
  }
  // Tried here (MayWait() is false), handed off by the handler if the call
  // would wait. Most writes find staging memory free and only copy:
  // answering them here spares a serial store loop a hand-off per 1 MiB
  // (3-29%). When other requests were already waiting, workers copy
  // writes in parallel.
  return !(backlog && in->opcode == FUSE_WRITE);
}

RequestLoop::RequestLoop(fuse_session* se, unsigned max_workers, std::chrono::microseconds spin)
    : se_(se), max_workers_(max_workers == 0 ? 1 : max_workers), spin_(spin) {}

RequestLoop::~RequestLoop() {
  for (fuse_buf& b : spare_) std::free(b.mem);
  for (Queued& q : queue_) {
    if (q.done == nullptr) std::free(q.buf.mem);
  }
  if (stop_fd_ >= 0) close(stop_fd_);
}

int RequestLoop::Run(const sigset_t& signals) {
  fd_ = fuse_session_fd(se_);
  int flags = fcntl(fd_, F_GETFL);
  if (flags < 0 || fcntl(fd_, F_SETFL, flags | O_NONBLOCK) < 0) return -errno;
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) return -errno;
  int sig_fd = signalfd(-1, &signals, SFD_CLOEXEC);
  if (sig_fd < 0) return -errno;

  std::thread receiver;
  try {
    receiver = std::thread([this] { Receive(); });
  } catch (const std::system_error& e) {
    close(sig_fd);
    return -EAGAIN;
  }
  int result = 0;
  pollfd fds[2] = {{sig_fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      result = -errno;
      break;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo si;
      if (read(sig_fd, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
        result = static_cast<int>(si.ssi_signo);
        break;
      }
    }
    if (fds[1].revents & POLLIN) break;  // the receiver ended: unmounted or failed
  }
  close(sig_fd);
  fuse_session_exit(se_);
  Stop();
  receiver.join();
  std::vector<std::thread> workers;
  {
    MutexLock l(mu_);
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
  if (result == 0 && error_.load() != 0) result = error_.load();
  return result;
}

void RequestLoop::Stop() {
  uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof(one));
  MutexLock l(mu_);
  stopping_ = true;
  work_cv_.NotifyAll();
}

namespace {
thread_local bool t_on_receiver = false;
thread_local bool t_may_wait = false;    // a receiver running a request it could not hand off
thread_local bool t_handed_off = false;  // set by HandOff(), read by RunHere()
}  // namespace

bool RequestLoop::OnReceiver() { return t_on_receiver; }
void RequestLoop::ServeAsReceiver() { t_on_receiver = true; }
bool RequestLoop::MayWait() { return !t_on_receiver || t_may_wait; }

void RequestLoop::HandOff(fuse_req_t req) {
  fuse_reply_none(req);  // frees the request; the kernel gets no answer yet
  t_handed_off = true;
}

bool RequestLoop::RunHere(fuse_session* se, fuse_buf& buf) {
  t_handed_off = false;
  fuse_session_process_buf(se, &buf);
  const bool handed_off = t_handed_off;
  t_handed_off = false;
  return !handed_off;
}

void RequestLoop::RunWaiting(fuse_session* se, fuse_buf& buf) {
  t_may_wait = true;
  fuse_session_process_buf(se, &buf);
  t_may_wait = false;
}

void RequestLoop::Fail(int error) {
  int none = 0;
  error_.compare_exchange_strong(none, -error);
  fuse_session_exit(se_);
  Stop();
}

bool RequestLoop::Offload(const fuse_buf& buf, uint64_t received_ns, Done done, void* ctx) {
  MutexLock l(mu_);
  if (stopping_ || !HaveWorker()) return false;
  Queued q;
  q.buf = buf;
  q.done = done;
  q.ctx = ctx;
  q.received_ns = received_ns;
  queue_.push_back(q);
  if (idle_workers_ > 0) work_cv_.NotifyOne();
  return true;
}

void RequestLoop::Receive() {
  pthread_setname_np(pthread_self(), "kvfs-recv");
  t_on_receiver = true;
  fuse_buf buf{};
  auto spin_until = std::chrono::steady_clock::now();
  bool waited = true;  // since the last request
  while (!fuse_session_exited(se_)) {
    int res = fuse_session_receive_buf(se_, &buf);
    if (res == -EAGAIN) {
      waited = true;
      if (std::chrono::steady_clock::now() < spin_until) {
        sched_yield();
        continue;
      }
      pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      poll(fds, 2, -1);  // EINTR or not: the loop looks again
      continue;
    }
    if (res == -EINTR) continue;
    if (res <= 0) {  // 0: unmounted (ENODEV) or the session was ended
      if (res < 0) {
        Fail(-res);
        spdlog::error("reading /dev/fuse: {}", std::strerror(-res));
      }
      break;
    }
    const uint64_t received_ns = RequestClockNs();
    uint32_t opcode = 0;
    if (buf.size >= sizeof(fuse_in_header)) {
      opcode = static_cast<const fuse_in_header*>(buf.mem)->opcode;
      CountRequest(*static_cast<const fuse_in_header*>(buf.mem));
    }
    TmpfileAsCreate(buf);  // libfuse 3.14 has no FUSE_TMPFILE (fuse/tmpfile.h)
    const bool backlog = !waited;
    waited = false;
    if (RunsInReceiver(buf, backlog)) {
      const bool init = IsInit(buf);
      const bool ran = RunHere(se_, buf);
      if (init && fuse_session_exited(se_)) {
        // libfuse ends the session when it refuses the kernel's INIT (too
        // old a protocol); the mount then failed.
        Fail(EPROTO);
        spdlog::error("the kernel's FUSE INIT was refused");
        break;
      }
      if (ran) {
        TimeHandled(opcode, RequestClockNs() - received_ns);
      } else {
        Dispatch(buf, received_ns);
      }
    } else {
      Dispatch(buf, received_ns);
    }
    spin_until = std::chrono::steady_clock::now() + spin_;
  }
  std::free(buf.mem);
  fuse_session_exit(se_);
  Stop();
}

void RequestLoop::Dispatch(fuse_buf& buf, uint64_t received_ns) {
  // No thread, no memory for a copy, or enough large writes queued already
  // (which bounds the daemon's memory; a write never needs another request
  // of this mount to finish): it runs here.
  if (Enqueue(buf, received_ns)) return;
  const uint32_t opcode = static_cast<const fuse_in_header*>(buf.mem)->opcode;
  RunWaiting(se_, buf);
  TimeHandled(opcode, RequestClockNs() - received_ns);
}

bool RequestLoop::HaveWorker() {
  if (queue_.size() >= idle_workers_ && workers_.size() < max_workers_) {
    try {
      // It waits for mu_, and finds the request the caller queues.
      workers_.emplace_back([this] { Work(); });
    } catch (const std::system_error& e) {
      // No thread now (pids limit): the queue waits for the workers there
      // are, if any.
      spdlog::warn("starting a FUSE worker thread: {}", e.what());
      return !workers_.empty();
    }
  }
  return true;
}

bool RequestLoop::Enqueue(fuse_buf& buf, uint64_t received_ns) {
  MutexLock l(mu_);
  const bool large = buf.size > kSmallRequest;
  if (large && queued_large_ >= kMaxQueuedLarge) return false;
  if (!HaveWorker()) return false;
  Queued q;
  if (large) {
    q.buf = buf;
    q.large = true;
    ++queued_large_;
    buf = fuse_buf{};
    if (!spare_.empty()) {
      buf = spare_.back();
      spare_.pop_back();
    }
  } else {
    // Most requests are a few hundred bytes: a copy frees the receive
    // buffer (max_write + headers) for the next request.
    q.buf.mem = std::malloc(buf.size);
    if (q.buf.mem == nullptr) return false;
    std::memcpy(q.buf.mem, buf.mem, buf.size);
    q.buf.size = buf.size;
  }
  q.received_ns = received_ns;
  queue_.push_back(q);
  if (idle_workers_ > 0) work_cv_.NotifyOne();
  return true;
}

void RequestLoop::Recycle(Queued& q) {
  if (q.done != nullptr) {
    q.done(q.ctx);
    return;
  }
  MutexLock l(mu_);
  // A few receive buffers are kept for the receiver; copies and a burst's
  // other buffers go back to the allocator.
  if (q.large && spare_.size() < kSpareBuffers) {
    spare_.push_back(q.buf);
  } else {
    std::free(q.buf.mem);
  }
}

void RequestLoop::Work() {
  pthread_setname_np(pthread_self(), "kvfs-worker");
  MutexLock l(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) return;
      ++idle_workers_;
      while (!stopping_ && queue_.empty()) work_cv_.Wait(l);
      --idle_workers_;
      continue;
    }
    // Requests read before the loop ended are still run (a signal ends the
    // loop while the file system is mounted and its callers wait).
    Queued q = queue_.front();
    queue_.pop_front();
    if (q.large) --queued_large_;
    l.Unlock();
    // Dispatched requests are at least a header long (RunsInReceiver).
    const uint32_t opcode = static_cast<const fuse_in_header*>(q.buf.mem)->opcode;
    TimeHandoff(opcode, RequestClockNs() - q.received_ns);
    fuse_session_process_buf(se_, &q.buf);
    TimeHandled(opcode, RequestClockNs() - q.received_ns);
    Recycle(q);
    l.Lock();
  }
}

}  // namespace kvfs::fuse
