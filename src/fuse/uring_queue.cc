#include "fuse/uring_queue.h"

#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include <spdlog/spdlog.h>

#include "fuse/op_counters.h"
#include "fuse/request_loop.h"
#include "fuse/tmpfile.h"
#include "fuse/uring_transport.h"

namespace kvfs::fuse {

namespace {

// The queue whose thread this is (null elsewhere): a reply written on it
// needs no wake-up.
thread_local UringQueue* t_queue = nullptr;

constexpr size_t kPage = 4096;
constexpr unsigned kMaxBatch = 32;  // completions taken at once

// Copies the body of libfuse's reply (iov[1..count)) to `dst`.
void GatherBody(char* dst, const iovec* iov, int count) {
  for (int i = 1; i < count; ++i) {
    std::memcpy(dst, iov[i].iov_base, iov[i].iov_len);
    dst += iov[i].iov_len;
  }
}

size_t BodyLength(const iovec* iov, int count) {
  size_t n = 0;
  for (int i = 1; i < count; ++i) n += iov[i].iov_len;
  return n;
}

}  // namespace


UringQueue::UringQueue(UringTransport& transport, uint16_t qid, unsigned entries,
                       uint32_t payload_bytes, std::chrono::microseconds spin)
    : transport_(transport),
      qid_(qid),
      nentries_(std::max(1u, entries)),
      payload_bytes_(payload_bytes),
      spin_(spin) {}

UringQueue::~UringQueue() {
  Stop();
  // The buffers are unmapped only now (the transport goes after the
  // session closed /dev/fuse, ending the connection), so that the kernel
  // never copies a request into memory that was given back.
  if (buffers_ != nullptr) munmap(buffers_, buffers_len_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

int UringQueue::Start() {
  try {
    thread_ = std::thread([this] { Run(); });
  } catch (const std::system_error& e) {
    return EAGAIN;
  }
  MutexLock l(start_mu_);
  while (!started_) start_cv_.Wait(l);
  return start_error_;
}

void UringQueue::Stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true, std::memory_order_seq_cst);
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
}

void UringQueue::Run() {
  t_queue = this;
  const std::string name = "kvfs-ring-" + std::to_string(qid_);
  pthread_setname_np(pthread_self(), name.c_str());
  RequestLoop::ServeAsReceiver();
  int err = SetUp();
  {
    MutexLock l(start_mu_);
    started_ = true;
    start_error_ = err;
  }
  start_cv_.NotifyAll();
  if (err == 0) Serve();
  if (ring_ok_) io_uring_queue_exit(&ring_);
  ring_ok_ = false;
}

int UringQueue::SetUp() {
  // On its own CPU: the kernel queues a CPU's requests here, and the
  // thread that serves them where they were made wakes no other CPU.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(qid_, &cpus);
  (void)pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);  // offline CPU: unpinned

  // Every entry holds at most one command, and the wake-up read one more.
  const unsigned depth = nentries_ + 2;
  int rc = io_uring_queue_init(depth, &ring_, IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER);
  if (rc == -EINVAL) rc = io_uring_queue_init(depth, &ring_, IORING_SETUP_SQE128);
  if (rc < 0) return -rc;
  ring_ok_ = true;

  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (wake_fd_ < 0) return errno;

  const size_t per_entry = kHeadroom + (payload_bytes_ + kPage - 1) / kPage * kPage;
  buffers_len_ = per_entry * nentries_;
  void* p = mmap(nullptr, buffers_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    buffers_len_ = 0;
    return errno;
  }
  buffers_ = p;

  entries_.reserve(nentries_);
  for (unsigned i = 0; i < nentries_; ++i) {
    auto e = std::make_unique<UringEntry>();
    e->queue = this;
    e->buffer = static_cast<char*>(buffers_) + i * per_entry;
    e->iov[0] = {&e->header, sizeof(e->header)};
    e->iov[1] = {Payload(e.get()), payload_bytes_};
    e->staging.reserve(kPage);
    PrepCommand(e.get(), uring_abi::kCmdRegister, 0);
    entries_.push_back(std::move(e));
  }
  ArmWakeup();
  rc = io_uring_submit(&ring_);
  if (rc < 0) return -rc;
  dirty_ = false;
  // A refused registration completes at once; an accepted one stays
  // queued until a request comes. (Once the last queue registered, a
  // request may already be here: Serve() takes it.)
  io_uring_cqe* cqe = nullptr;
  if (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe->res < 0) return -cqe->res;
  return 0;
}

io_uring_sqe* UringQueue::TakeSqe() {
  // The ring has room for every entry's command and the wake-up read, so
  // the first try succeeds; a full queue is submitted rather than a
  // command dropped.
  for (;;) {
    if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) return sqe;
    io_uring_submit(&ring_);
  }
}

void UringQueue::PrepCommand(UringEntry* e, uint32_t cmd, uint64_t commit_id) {
  io_uring_sqe* sqe = TakeSqe();
  // SQE128: the command area runs on past the struct.
  std::memset(static_cast<void*>(reinterpret_cast<char*>(sqe)), 0, 2 * sizeof(*sqe));
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = transport_.device_fd();
  sqe->cmd_op = cmd;
  sqe->addr = reinterpret_cast<uintptr_t>(e->iov);
  sqe->len = 2;
  auto* req = reinterpret_cast<uring_abi::CmdReq*>(sqe->cmd);
  req->qid = qid_;
  req->commit_id = commit_id;
  io_uring_sqe_set_data(sqe, e);
  dirty_ = true;
}

void UringQueue::ArmWakeup() {
  io_uring_sqe* sqe = TakeSqe();
  io_uring_prep_read(sqe, wake_fd_, &wake_buf_, sizeof(wake_buf_), 0);
  io_uring_sqe_set_data(sqe, nullptr);
  dirty_ = true;
}

void UringQueue::Serve() {
  io_uring_cqe* cqes[kMaxBatch];
  for (;;) {
    DrainReady();
    // Stopping: done once every request taken was committed. The
    // connection gone: the kernel gave every entry back.
    if ((stopping_.load(std::memory_order_acquire) && owed_ == 0) || dead_ == nentries_) {
      Submit();
      break;
    }

    unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, kMaxBatch);
    if (n == 0 && spin_.count() > 0) {
      // The next request of a serial caller usually comes within a few
      // microseconds of the reply: look again before sleeping, yielding
      // the CPU to whatever is runnable.
      Submit();
      const auto until = std::chrono::steady_clock::now() + spin_;
      while (n == 0 && !has_ready_.load(std::memory_order_acquire) &&
             std::chrono::steady_clock::now() < until) {
        sched_yield();
        n = io_uring_peek_batch_cqe(&ring_, cqes, kMaxBatch);
      }
    }
    if (n == 0) {
      if (has_ready_.load(std::memory_order_acquire)) continue;
      sleeping_.store(true, std::memory_order_seq_cst);
      bool pending;
      {
        MutexLock l(ready_mu_);
        pending = !ready_.empty();
      }
      if (pending) {
        Submit();
      } else {
        // The replies prepared since the last submission go out in the
        // same system call that waits for the next request: one
        // io_uring_enter per request of a serial caller instead of two.
        int rc;
        if (dirty_) {
          // A failure submitted nothing (a partial wait returns the count
          // submitted): the commands go with the next submission.
          rc = io_uring_submit_and_wait(&ring_, 1);
          if (rc >= 0) dirty_ = false;
        } else {
          io_uring_cqe* cqe = nullptr;
          rc = io_uring_wait_cqe(&ring_, &cqe);
        }
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY && rc != -ETIME) {
          spdlog::error("FUSE io_uring queue {}: waiting: {}", qid_, std::strerror(-rc));
          sleeping_.store(false);
          break;
        }
      }
      sleeping_.store(false, std::memory_order_relaxed);
      continue;
    }
    // Replies first, then the requests that came meanwhile.
    Submit();
    for (unsigned i = 0; i < n; ++i) {
      auto* e = static_cast<UringEntry*>(io_uring_cqe_get_data(cqes[i]));
      const int res = cqes[i]->res;
      io_uring_cqe_seen(&ring_, cqes[i]);
      if (e == nullptr) {  // the wake-up read
        ArmWakeup();
        continue;
      }
      if (res < 0) {
        // ENOTCONN/ECANCELED: unmounted or the ring is closing.
        if (res != -ENOTCONN && res != -ECANCELED && res != -ENODEV) {
          spdlog::error("FUSE io_uring queue {}: entry failed: {}", qid_, std::strerror(-res));
        }
        ++dead_;
        continue;
      }
      // Stopping: a new request stays unanswered; the kernel ends it when
      // the connection closes, as it does requests never read from
      // /dev/fuse.
      if (stopping_.load(std::memory_order_acquire)) continue;
      TakeRequest(e, /*backlog=*/i + 1 < n);
    }
  }
}

void UringQueue::Submit() {
  if (!dirty_) return;
  io_uring_submit(&ring_);
  dirty_ = false;
}

void UringQueue::TakeRequest(UringEntry* e, bool backlog) {
  const uint64_t received_ns = RequestClockNs();
  fuse_in_header in;
  std::memcpy(&in, e->header.in_out, sizeof(in));
  const uint32_t payload = e->header.ring_ent_in_out.payload_sz;
  e->commit_id = e->header.ring_ent_in_out.commit_id;
  e->state.store(0, std::memory_order_relaxed);
  e->staged = false;
  ++owed_;

  // The opcode's argument went to op_in, the rest to the payload: what is
  // left of the request's length is the argument's size.
  const uint64_t rest = in.len >= sizeof(in) ? in.len - sizeof(in) : UINT64_MAX;
  if (rest == UINT64_MAX || rest < payload || rest - payload > uring_abi::kOpInBytes ||
      payload > payload_bytes_) {
    spdlog::error("FUSE io_uring queue {}: malformed request (opcode {}, length {}, payload {})",
                  qid_, in.opcode, in.len, payload);
    fuse_out_header out{};
    out.len = sizeof(out);
    out.error = -EIO;
    out.unique = in.unique;
    std::memcpy(e->header.in_out, &out, sizeof(out));
    e->header.ring_ent_in_out.payload_sz = 0;
    e->state.store(kProcessed | kReplied, std::memory_order_relaxed);
    Commit(e);
    return;
  }
  const size_t arg = rest - payload;
  e->request_has_payload = payload > 0;
  // In front of the payload, as /dev/fuse would give it.
  char* start = Payload(e) - arg - sizeof(in);
  std::memcpy(start, &in, sizeof(in));
  std::memcpy(start + sizeof(in), e->header.op_in, arg);
  CountRequest(in);
  transport_.Track(e, in.unique);

  fuse_buf buf{};
  buf.mem = start;
  buf.size = in.len;
  TmpfileAsCreate(buf);  // libfuse 3.14 has no FUSE_TMPFILE (fuse/tmpfile.h)
  // A worker runs the request in the entry's buffer, which stays the
  // request's until it is committed.
  RequestLoop* loop = transport_.loop();
  if (loop != nullptr && !loop->RunsInReceiver(buf, backlog) &&
      loop->Offload(buf, received_ns, &UringQueue::Processed, e)) {
    return;
  }
  if (!RequestLoop::RunHere(transport_.session(), buf)) {
    // Its call would wait (RequestLoop::HandOff): a worker runs it again.
    if (loop != nullptr && loop->Offload(buf, received_ns, &UringQueue::Processed, e)) return;
    RequestLoop::RunWaiting(transport_.session(), buf);
  }
  TimeHandled(in.opcode, RequestClockNs() - received_ns);
  const uint8_t before = e->state.fetch_or(kProcessed, std::memory_order_acq_rel);
  if (before & kReplied) Commit(e);
}

void UringQueue::Processed(void* entry) {
  auto* e = static_cast<UringEntry*>(entry);
  const uint8_t before = e->state.fetch_or(kProcessed, std::memory_order_acq_rel);
  if (before & kReplied) e->queue->PushReady(e);
}

ssize_t UringQueue::Reply(UringEntry* e, const iovec* iov, int count) {
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof(out));
  size_t body = BodyLength(iov, count);
  const size_t written = sizeof(out) + body;
  if (body > payload_bytes_) {
    spdlog::error("FUSE io_uring: a {} byte reply does not fit the entry ({} bytes)", body,
                  payload_bytes_);
    out.error = -EIO;
    body = 0;
  }
  out.len = static_cast<uint32_t>(sizeof(out) + body);
  std::memcpy(e->header.in_out, &out, sizeof(out));
  // The payload holds the request until libfuse is done with it: a reply
  // that comes before then waits in the staging buffer.
  if (!e->request_has_payload || (e->state.load(std::memory_order_acquire) & kProcessed)) {
    GatherBody(Payload(e), iov, body == 0 ? 1 : count);
    e->header.ring_ent_in_out.payload_sz = static_cast<uint32_t>(body);
    e->staged = false;
  } else {
    e->staging.resize(body);
    GatherBody(e->staging.data(), iov, body == 0 ? 1 : count);
    e->staged = true;
  }
  const uint8_t before = e->state.fetch_or(kReplied, std::memory_order_acq_rel);
  if (before & kProcessed) PushReady(e);
  return static_cast<ssize_t>(written);
}

void UringQueue::PushReady(UringEntry* e) {
  if (t_queue == this) {
    local_ready_.push_back(e);
    return;
  }
  {
    MutexLock l(ready_mu_);
    ready_.push_back(e);
    has_ready_.store(true, std::memory_order_release);
  }
  // Only a sleeping thread needs the wake-up (a write to the eventfd its
  // ring reads); never blocks.
  if (sleeping_.load(std::memory_order_seq_cst)) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
}

void UringQueue::DrainReady() {
  if (has_ready_.load(std::memory_order_acquire)) {
    {
      MutexLock l(ready_mu_);
      taken_.swap(ready_);
      has_ready_.store(false, std::memory_order_relaxed);
    }
    for (UringEntry* e : taken_) Commit(e);
    taken_.clear();
  }
  for (size_t i = 0; i < local_ready_.size(); ++i) Commit(local_ready_[i]);
  local_ready_.clear();
}

void UringQueue::Commit(UringEntry* e) {
  if (e->staged) {
    std::memcpy(Payload(e), e->staging.data(), e->staging.size());
    e->header.ring_ent_in_out.payload_sz = static_cast<uint32_t>(e->staging.size());
    e->staged = false;
  }
  PrepCommand(e, uring_abi::kCmdCommitAndFetch, e->commit_id);
  --owed_;
}

}  // namespace kvfs::fuse
