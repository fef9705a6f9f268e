#include "fuse/uring_transport.h"

#include <linux/fuse.h>
#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <spdlog/spdlog.h>

#include "fuse/passthrough.h"
#include "fuse/request_loop.h"
#include "fuse/session_state.h"
#include "fuse/uring_abi.h"
#include "fuse/uring_queue.h"

namespace kvfs::fuse {

namespace {

constexpr const char* kEnableParam = "/sys/module/fuse/parameters/enable_uring";

ssize_t WritevHook(int fd, iovec* iov, int count, void* userdata) {
  UringTransport* t = static_cast<SessionState*>(userdata)->uring;
  return t != nullptr ? t->Writev(fd, iov, count) : ::writev(fd, iov, count);
}

ssize_t ReadHook(int fd, void* buf, size_t len, void* userdata) {
  UringTransport* t = static_cast<SessionState*>(userdata)->uring;
  return t != nullptr ? t->Read(fd, buf, len) : ::read(fd, buf, len);
}

// The kernel makes one queue per possible CPU (num_possible_cpus()), and
// the ring serves only once every queue has an entry: count them from the
// "0-3,5" list the kernel publishes.
unsigned PossibleCpus() {
  std::ifstream f("/sys/devices/system/cpu/possible");
  std::string list;
  unsigned highest = 0;
  bool any = false;
  if (f >> list) {
    size_t pos = 0;
    while (pos < list.size()) {
      size_t comma = list.find(',', pos);
      std::string part = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      size_t dash = part.find('-');
      unsigned last = static_cast<unsigned>(std::stoul(dash == std::string::npos ? part : part.substr(dash + 1)));
      highest = std::max(highest, last);
      any = true;
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  if (!any) return static_cast<unsigned>(std::max(1L, sysconf(_SC_NPROCESSORS_CONF)));
  return highest + 1;
}

// Whether this process can make an SQE128 ring at all (io_uring may be
// switched off by kernel.io_uring_disabled, or memory locked short):
// asked before the ring is accepted, because once accepted the kernel
// holds every request until each queue has registered.
Status CanMakeRing() {
  io_uring ring;
  int rc = io_uring_queue_init(4, &ring, IORING_SETUP_SQE128);
  if (rc < 0) return Status::Error(-rc, std::string("io_uring_setup: ") + std::strerror(-rc));
  io_uring_queue_exit(&ring);
  return Status::OK();
}

// The kernel's cap on a request's pages (fs.fuse.max_pages_limit, Linux
// 6.13+), or 0 where it has none to read.
unsigned MaxPagesLimit() {
  std::ifstream f("/proc/sys/fs/fuse/max_pages_limit");
  unsigned v = 0;
  return (f >> v) ? v : 0;
}

}  // namespace

const char* TransportName(Transport t) {
  switch (t) {
    case Transport::kAuto:
      return "auto";
    case Transport::kUring:
      return "uring";
    case Transport::kDev:
      return "dev";
  }
  return "?";
}

Status UringAvailable() {
  std::ifstream f(kEnableParam);
  char c = 0;
  if (!(f >> c)) {
    return Status::Error(EOPNOTSUPP,
                         "this kernel has no FUSE over io_uring (needs Linux 6.14+ built with "
                         "CONFIG_FUSE_IO_URING)");
  }
  if (c != 'Y' && c != 'y' && c != '1') {
    return Status::Error(EPERM, std::string("FUSE over io_uring is switched off in the kernel; as "
                                            "root: echo Y > ") +
                                    kEnableParam);
  }
  return Status::OK();
}

Result<std::unique_ptr<UringTransport>> UringTransport::Install(fuse_session* se,
                                                                const Options& options) {
  std::unique_ptr<UringTransport> t(new UringTransport(se, options));
  t->fd_ = fuse_session_fd(se);
  fuse_custom_io io{};
  io.writev = WritevHook;
  io.read = ReadHook;
  int rc = fuse_session_custom_io(se, &io, t->fd_);
  if (rc != 0) return Status::Error(rc < 0 ? -rc : EIO, "fuse_session_custom_io");
  return t;
}

UringTransport::UringTransport(fuse_session* se, const Options& o) : se_(se), options_(o) {}

UringTransport::~UringTransport() { Stop(); }

std::string UringTransport::Describe() const {
  if (!active()) return "/dev/fuse";
  return "io_uring (" + std::to_string(queues_.size()) + " queues x " +
         std::to_string(options_.entries_per_queue) + " entries)";
}

ssize_t UringTransport::Read(int fd, void* buf, size_t len) {
  if (large_requests_) return ReadLarge(fd, buf, len);
  ssize_t n = ::read(fd, buf, len);
  if (!init_done_.load(std::memory_order_relaxed) &&
      n >= static_cast<ssize_t>(sizeof(fuse_in_header))) {
    const auto* in = static_cast<const fuse_in_header*>(buf);
    if (in->opcode == FUSE_INIT) {
      if (options_.passthrough != nullptr) {
        options_.passthrough->NoteInitRequest(buf, static_cast<size_t>(n));
      }
      init_unique_ = in->unique;
      init_offered_ = false;
      // flags2 (protocol 7.36+) follows flags; an older kernel's INIT is
      // shorter and offers nothing.
      const size_t have = static_cast<size_t>(n) - sizeof(fuse_in_header);
      if (have >= offsetof(fuse_init_in, flags2) + sizeof(uint32_t)) {
        fuse_init_in init{};
        std::memcpy(&init, in + 1, std::min(have, sizeof(init)));
        uint64_t flags = init.flags;
        if (flags & FUSE_INIT_EXT) flags |= static_cast<uint64_t>(init.flags2) << 32;
        init_offered_ = (flags & uring_abi::kOverIoUring) != 0;
      }
    }
  }
  return n;
}

// The kernel refuses a /dev/fuse read into less than max_write plus headers,
// and libfuse's buffer holds 1 MiB: read into one that holds the largest
// request. Only requests that come before every queue has registered, and
// interrupts and forgets after, come this way. One that fits libfuse's
// buffer is copied there; a larger one (a write right after the mount) is
// run from here, as the receiver would run it, and the read reports EAGAIN
// (the request loop then polls the device again). It runs here even if it
// may wait for staging memory: the buffer is needed for the next read, and
// a write never needs another request of the mount to finish.
ssize_t UringTransport::ReadLarge(int fd, void* buf, size_t len) {
  ssize_t n = ::read(fd, large_buf_.get(), large_buf_size_);
  if (n < 0 || static_cast<size_t>(n) <= len) {
    if (n > 0) std::memcpy(buf, large_buf_.get(), static_cast<size_t>(n));
    return n;
  }
  fuse_buf b{};
  b.mem = large_buf_.get();
  b.size = static_cast<size_t>(n);
  RequestLoop::RunWaiting(se_, b);
  errno = EAGAIN;
  return -1;
}

ssize_t UringTransport::Writev(int fd, iovec* iov, int count) {
  if (count >= 1 && iov[0].iov_len >= sizeof(fuse_out_header)) {
    const auto* out = static_cast<const fuse_out_header*>(iov[0].iov_base);
    if (!init_done_.load(std::memory_order_relaxed) && init_unique_ != 0 &&
        out->unique == init_unique_) {
      return WriteInitReply(fd, iov, count);
    }
    if (out->unique != 0 && tracking_.load(std::memory_order_acquire)) {
      if (UringEntry* e = Untrack(out->unique)) return e->queue->Reply(e, iov, count);
    }
  }
  return ::writev(fd, iov, count);
}

ssize_t UringTransport::WriteInitReply(int fd, iovec* iov, int count) {
  init_done_.store(true, std::memory_order_relaxed);
  const auto* out = static_cast<const fuse_out_header*>(iov[0].iov_base);
  if (out->error != 0 || count != 2 || iov[1].iov_len < offsetof(fuse_init_out, flags2) + 4) {
    return ::writev(fd, iov, count);  // libfuse refused the kernel: nothing to add
  }
  fuse_init_out init{};
  const size_t init_len = std::min(iov[1].iov_len, sizeof(init));
  std::memcpy(&init, iov[1].iov_base, init_len);
  if (options_.passthrough != nullptr) options_.passthrough->EditInitReply(&init, init_len, fd);
  iovec edited[2] = {iov[0], {&init, init_len}};
  Status why;
  if (!init_offered_) {
    why = Status::Error(EOPNOTSUPP, "the kernel did not offer FUSE over io_uring in FUSE_INIT");
  } else {
    why = CanMakeRing();
  }
  if (!why.ok()) {
    if (!options_.required) {
      spdlog::info("FUSE transport: /dev/fuse ({})", why.context());
      return ::writev(fd, edited, 2);
    }
    spdlog::error("transport=uring: {}", why.context());
    fuse_out_header refused = *out;
    refused.len = sizeof(refused);
    refused.error = -EPROTO;
    iovec v = {&refused, sizeof(refused)};
    (void)!::writev(fd, &v, 1);
    fuse_session_exit(se_);
    return static_cast<ssize_t>(iov[0].iov_len + iov[1].iov_len);
  }

  init.flags |= FUSE_INIT_EXT;
  init.flags2 |= static_cast<uint32_t>(uring_abi::kOverIoUring >> 32);
  if (options_.max_request > init.max_write && (init.flags & FUSE_MAX_PAGES)) {
    init.max_write = options_.max_request;
    init.max_pages = static_cast<uint16_t>(options_.max_request / 4096);
    large_buf_size_ = options_.max_request + 4096;  // headers: in, write_in
    large_buf_.reset(new char[large_buf_size_]);
    large_requests_ = true;
    const unsigned limit = MaxPagesLimit();
    if (limit != 0 && limit < init.max_pages) {
      spdlog::warn("max_request_mb={}: the kernel's fs.fuse.max_pages_limit={} keeps FUSE reads "
                   "and writes at {} KiB; as root: sysctl fs.fuse.max_pages_limit={}",
                   options_.max_request >> 20, limit, limit * 4, init.max_pages);
    }
  }
  iovec v[2] = {iov[0], {&init, init_len}};
  ssize_t n = ::writev(fd, v, 2);
  if (n < 0) return n;

  // The kernel's largest payload: a write's data, a read's reply, or a
  // FUSE_MIN_READ_BUFFER, whichever is largest.
  uint32_t payload = std::max<uint32_t>(8192, init.max_write);
  if (init.flags & FUSE_MAX_PAGES) payload = std::max<uint32_t>(payload, init.max_pages * 4096u);
  StartQueues(payload);
  return n;
}

void UringTransport::StartQueues(uint32_t payload_bytes) {
  tracking_.store(true, std::memory_order_release);
  const unsigned n = PossibleCpus();
  for (unsigned q = 0; q < n; ++q) {
    queues_.push_back(std::make_unique<UringQueue>(*this, static_cast<uint16_t>(q),
                                                   options_.entries_per_queue, payload_bytes,
                                                   options_.spin));
    int err = queues_.back()->Start();
    if (err == ENOTCONN || err == ECONNABORTED || err == ENODEV) {
      // Unmounted (or the connection aborted) between the INIT reply and
      // here: nothing is left to serve, and nothing failed. The request
      // loop's next read of /dev/fuse sees the end (ENODEV) and the
      // daemon ends as after any unmount.
      spdlog::info("FUSE io_uring queue {}: the connection ended before it registered "
                   "(unmounted)", q);
      return;
    }
    if (err != 0) {
      Fail("registering FUSE io_uring queue " + std::to_string(q) + ": " + std::strerror(err));
      return;
    }
  }
  active_.store(true, std::memory_order_release);
  spdlog::info("FUSE transport: {}, {} KiB per entry", Describe(), payload_bytes >> 10);
}

void UringTransport::Fail(const std::string& why) {
  // The kernel holds every request until all queues have registered: no
  // request can be served, so the mount ends.
  spdlog::error("{}: ending the mount", why);
  fuse_session_exit(se_);
  if (loop_ != nullptr) loop_->Fail(EIO);
}

void UringTransport::Track(UringEntry* e, uint64_t unique) {
  Shard& s = shards_[(unique >> 1) % kShards];
  MutexLock l(s.mu);
  s.by_unique[unique] = e;
}

UringEntry* UringTransport::Untrack(uint64_t unique) {
  Shard& s = shards_[(unique >> 1) % kShards];
  MutexLock l(s.mu);
  auto it = s.by_unique.find(unique);
  if (it == s.by_unique.end()) return nullptr;
  UringEntry* e = it->second;
  s.by_unique.erase(it);
  return e;
}

void UringTransport::Stop() {
  if (stopped_.exchange(true)) return;
  for (auto& q : queues_) q->Stop();
}

}  // namespace kvfs::fuse
