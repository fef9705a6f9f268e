#include "fuse/request_loop.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "kvfs/ioctl.h"

namespace kvfs::fuse {

namespace {

// Reads up to this size run on the receiver. A larger one is copied from the
// cache into the caller's pages by the thread that replies (~100 us per MiB),
// and the kernel sends the 1 MiB pieces of a large read at once: workers
// copy them in parallel.
constexpr uint32_t kMaxReceiverRead = 256 << 10;

// Requests the receiver runs itself: their handlers never wait for the
// device or for memory (fs/ replies to reads and fsyncs from completions;
// flush and release only queue work) and copy little. Anything else goes
// to a worker.
bool RunsInReceiver(const fuse_buf& buf) {
  if (buf.size < sizeof(fuse_in_header)) return true;  // libfuse rejects it
  const auto* in = static_cast<const fuse_in_header*>(buf.mem);
  switch (in->opcode) {
    case FUSE_READ: {
      if (buf.size < sizeof(fuse_in_header) + sizeof(fuse_read_in)) return true;
      const auto* read = reinterpret_cast<const fuse_read_in*>(in + 1);
      return read->size <= kMaxReceiverRead;
    }
    case FUSE_IOCTL: {
      // kvfs's own commands go to a worker: REGISTER opens the caller's
      // file through /proc, and that file may be on this very mount (whose
      // OPEN the receiver must be free to read). Anything else (TCGETS from
      // every Python open()) gets ENOTTY at once.
      if (buf.size < sizeof(fuse_in_header) + sizeof(fuse_ioctl_in)) return true;
      const auto* ioctl = reinterpret_cast<const fuse_ioctl_in*>(in + 1);
      return _IOC_TYPE(ioctl->cmd) != KVFS_IOC_MAGIC;
    }
    case FUSE_LOOKUP:
    case FUSE_FORGET:
    case FUSE_BATCH_FORGET:
    case FUSE_GETATTR:
    case FUSE_OPEN:
    case FUSE_OPENDIR:
    case FUSE_FLUSH:
    case FUSE_RELEASE:
    case FUSE_RELEASEDIR:
    case FUSE_FSYNC:
    case FUSE_CREATE:
    case FUSE_MKDIR:
    case FUSE_UNLINK:
    case FUSE_RMDIR:
    case FUSE_RENAME:
    case FUSE_RENAME2:
    case FUSE_STATFS:
    case FUSE_ACCESS:
    case FUSE_GETXATTR:
    case FUSE_LISTXATTR:
    case FUSE_INTERRUPT:
    case FUSE_INIT:
    case FUSE_DESTROY:
      return true;
    default:
      return false;
  }
}

}  // namespace

RequestLoop::RequestLoop(fuse_session* se, unsigned max_workers, std::chrono::microseconds spin)
    : se_(se), max_workers_(max_workers == 0 ? 1 : max_workers), spin_(spin) {}

RequestLoop::~RequestLoop() {
  for (fuse_buf& b : spare_) std::free(b.mem);
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

  std::thread receiver([this] { Receive(); });
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
    std::lock_guard<std::mutex> l(mu_);
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
  if (result == 0 && error_ != 0) result = error_;
  return result;
}

void RequestLoop::Stop() {
  uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof(one));
  std::lock_guard<std::mutex> l(mu_);
  stopping_ = true;
  work_cv_.notify_all();
}

void RequestLoop::Receive() {
  fuse_buf buf{};
  auto spin_until = std::chrono::steady_clock::now();
  while (!fuse_session_exited(se_)) {
    int res = fuse_session_receive_buf(se_, &buf);
    if (res == -EAGAIN) {
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
        error_ = res;
        spdlog::error("reading /dev/fuse: {}", std::strerror(-res));
      }
      break;
    }
    if (RunsInReceiver(buf)) {
      fuse_session_process_buf(se_, &buf);
    } else {
      Dispatch(buf);
    }
    spin_until = std::chrono::steady_clock::now() + spin_;
  }
  std::free(buf.mem);
  fuse_session_exit(se_);
  Stop();
}

void RequestLoop::Dispatch(fuse_buf& buf) {
  std::lock_guard<std::mutex> l(mu_);
  queue_.push_back(buf);
  buf = fuse_buf{};
  if (!spare_.empty()) {
    buf = spare_.back();
    spare_.pop_back();
  }
  if (idle_workers_ > 0) {
    work_cv_.notify_one();
  } else if (workers_.size() < max_workers_) {
    workers_.emplace_back([this] { Work(); });
  }
}

void RequestLoop::Work() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) return;
      ++idle_workers_;
      work_cv_.wait(l, [this] { return stopping_ || !queue_.empty(); });
      --idle_workers_;
      continue;
    }
    // Requests read before the loop ended are still run (a signal ends the
    // loop while the file system is mounted and its callers wait).
    fuse_buf buf = queue_.front();
    queue_.pop_front();
    l.unlock();
    fuse_session_process_buf(se_, &buf);
    l.lock();
    // A few buffers (one request each, max_write + headers) are kept for
    // the receiver; a burst's others go back to the allocator.
    if (spare_.size() < 4) {
      spare_.push_back(buf);
    } else {
      std::free(buf.mem);
    }
  }
}

}  // namespace kvfs::fuse
