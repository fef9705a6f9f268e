#include "device/io_engine.h"

#include <liburing.h>
#include <pthread.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <utility>

#include "common/format.h"
#include "common/mutex.h"
#include "common/rw_lock.h"

namespace kvfs::device {

namespace {

// user_data of the NOP that tells a completion thread to exit. Command
// pointers are at least 8-aligned, so they never equal it.
constexpr uint64_t kStopTag = 1;
// Reissues of a command that completed with -EAGAIN before it fails.
constexpr uint8_t kMaxEagainRetries = 16;
constexpr unsigned kMaxQueueDepth = 4096;
constexpr size_t kMaxCommandBytes = size_t{1} << 30;

const char* OpName(IoOp op) {
  switch (op) {
    case IoOp::kRead:
      return "read";
    case IoOp::kWrite:
      return "write";
    case IoOp::kFlush:
      return "flush";
  }
  return "unknown op";
}

struct Request;

// One device command: a piece of a request of at most max_command_bytes, or
// a whole flush. Lives inside its Request; its address is the SQE user_data.
struct Command {
  Request* req = nullptr;
  char* buf = nullptr;
  uint64_t byte_off = 0;
  uint32_t len = 0;
  uint32_t done_bytes = 0;  // progress so far (short transfers)
  uint32_t device = 0;
  IoOp op = IoOp::kRead;
  int fixed_slot = -1;   // the registered buffer that holds buf, or -1
  bool invalid = false;  // failed validation; issued as a NOP to reach a thread
  uint8_t eagain_retries = 0;
};

// The state of one IoRequest. Allocated by Submit(), freed by the completion
// thread that finishes its last command, after reading first_error.
struct Request {
  std::function<void(Status)> done;
  std::atomic<uint32_t> remaining{0};  // commands not yet finished
  Mutex mu;
  Status first_error GUARDED_BY(mu);
  Command inline_cmd;  // most requests are one command: no second allocation
  std::unique_ptr<Command[]> more;
  Command* cmds = nullptr;

  void RecordError(Status st) {
    MutexLock l(mu);
    if (first_error.ok()) first_error = std::move(st);
  }
};

// Identifies the engine and ring whose completion thread is running, so that
// a Submit() from a `done` callback can stay on that thread's own ring.
thread_local const void* tls_engine = nullptr;
thread_local unsigned tls_ring = 0;
// Set when a callback queued SQEs on its own completion thread's ring: the
// thread hands them to the kernel in the same io_uring_enter with which it
// next waits, one syscall per round trip instead of two.
thread_local bool tls_deferred_enter = false;
// Per-thread scratch for Submit(): commands grouped by ring. Submit() never
// runs callbacks, so it is not re-entered on one thread.
thread_local std::vector<std::vector<Command*>> tls_batches;

}  // namespace

class IoEngine::Impl {
 public:
  struct Ring {
    io_uring uring{};
    bool initialized = false;
    // Guards the submission queue (SQE preparation and the SQ tail) and the
    // fields below; the io_uring_enter syscall itself runs without it.
    // Lock order: before Request::mu; never held while running a callback
    // or while taking another ring's mu.
    Mutex mu;
    std::deque<Command*> pending GUARDED_BY(mu);  // waiting for the in-flight cap
    unsigned inflight GUARDED_BY(mu) = 0;  // commands owned by the kernel
    unsigned max_inflight GUARDED_BY(mu) = 0;
    // inflight + pending.size(), read without mu as a placement hint only.
    std::atomic<unsigned> load{0};
    // An io_uring_enter failed with SQEs published: the next Pump() enters
    // again whatever it prepares.
    std::atomic<bool> enter_failed{false};
    std::thread thread;
  };

  Impl(std::vector<const BlockDevice*> devices, const IoEngineOptions& options)
      : devices_(std::move(devices)), options_(options) {}
  ~Impl();

  Status Init();
  void Submit(std::span<IoRequest> reqs);
  Status RegisterRegion(const char* base, size_t len);
  void UnregisterRegions(const char* base, size_t len);

  std::vector<const BlockDevice*> devices_;
  IoEngineOptions options_;
  std::unique_ptr<BufferPool> pool_;
  // Memory registered with every ring (RegisterRegion), in slots of at most
  // kFixedPieceBytes (the kernel's limit per registered buffer).
  struct FixedRegion {
    const char* base = nullptr;
    size_t len = 0;
    unsigned first_slot = 0;
  };
  SharedMutex regions_mu_;
  std::vector<FixedRegion> regions_ GUARDED_BY(regions_mu_);
  std::vector<bool> slot_used_ GUARDED_BY(regions_mu_);  // kFixedSlots
  std::vector<std::unique_ptr<Ring>> rings_;
  bool threads_started_ = false;

  std::atomic<uint64_t> next_ring_{0};
  // Requests whose `done` has not yet returned. The destructor waits for 0.
  std::atomic<uint64_t> outstanding_{0};
  Mutex drain_mu_;
  CondVar drained_cv_;

  std::atomic<uint64_t> stat_requests_{0};
  std::atomic<uint64_t> stat_commands_{0};
  std::atomic<uint64_t> stat_fixed_{0};
  std::atomic<uint64_t> stat_short_{0};
  std::atomic<uint64_t> stat_eagain_{0};

 private:
  Status Validate(const IoRequest& r) const;
  unsigned StartRing(uint32_t ncmds);
  // Moves pending commands into SQEs up to the cap and publishes them to
  // the kernel. Returns whether an io_uring_enter is needed to submit them.
  bool Pump(Ring& r) REQUIRES(r.mu);
  // Publishes prepared SQEs (the SQ tail) without a syscall.
  static void FlushSq(Ring& r) REQUIRES(r.mu);
  // io_uring_enter: submits every published SQE and, if `wait`, waits for
  // at least one CQE (or returns early; callers loop). Needs no lock: the
  // kernel serializes submitters and never consumes an SQE twice.
  void Enter(Ring& r, bool wait);
  void Prep(io_uring_sqe* sqe, Command* c) const;
  // Registered buffers: each ring's table has kFixedSlots slots of at most
  // kFixedPieceBytes.
  static constexpr size_t kFixedPieceBytes = size_t{1} << 30;
  static constexpr unsigned kFixedSlots = 1024;
  static unsigned PiecesOf(size_t len) {
    return static_cast<unsigned>((len + kFixedPieceBytes - 1) / kFixedPieceBytes);
  }
  // Empties slots [first, first + pieces) in the first `nrings` rings.
  void ClearSlots(unsigned first, unsigned pieces, size_t nrings);
  // The slot of the registered piece that holds all of [p, p + len), or -1.
  int FixedSlotLocked(const char* p, size_t len) const REQUIRES_SHARED(regions_mu_) {
    for (const FixedRegion& r : regions_) {
      if (p < r.base || p + len > r.base + r.len) continue;
      size_t first = static_cast<size_t>(p - r.base) / kFixedPieceBytes;
      size_t last = static_cast<size_t>(p + len - 1 - r.base) / kFixedPieceBytes;
      return first == last ? static_cast<int>(r.first_slot + first) : -1;
    }
    return -1;
  }
  void RunCompletions(unsigned ring_index);
  // REQUIRES: the ring's mu held
  void HandleCqe(Command* c, int res, std::vector<Command*>* retry,
                 std::vector<Request*>* finished);
  void Finish(Request* q);
  Status CommandError(const Command& c, int err, const std::string& what) const;
};

Status IoEngine::Impl::Init() {
  if (devices_.empty()) return Status::Error(EINVAL, "io engine: no devices");
  if (options_.queue_depth == 0 || options_.queue_depth > kMaxQueueDepth) {
    return Status::Error(EINVAL, "io engine: queue_depth " + std::to_string(options_.queue_depth) +
                                     " outside 1.." + std::to_string(kMaxQueueDepth));
  }
  if (options_.max_command_bytes == 0 || options_.max_command_bytes % kBlockSize != 0 ||
      options_.max_command_bytes > kMaxCommandBytes) {
    return Status::Error(EINVAL, "io engine: max_command_bytes " +
                                     std::to_string(options_.max_command_bytes) +
                                     " must be a multiple of 4096 up to 1 GiB");
  }
  if (options_.rings == 0) {
    unsigned cores = std::thread::hardware_concurrency();
    options_.rings = std::min(std::max(cores, 2u), 8u);
  }
  if (options_.staging_pool_bytes > 0) {
    auto pool = BufferPool::Create(options_.staging_pool_bytes, options_.staging_slot_bytes);
    if (!pool.ok()) return pool.status().Annotate("io engine");
    pool_ = std::move(pool).value();
  }

  std::vector<int> fds;
  for (const BlockDevice* d : devices_) fds.push_back(d->fd());
  // The SQ holds every command the cap allows in flight; the CQ (twice the
  // SQ) therefore cannot overflow.
  unsigned entries = 8;
  while (entries < options_.queue_depth) entries <<= 1;

  for (unsigned i = 0; i < options_.rings; ++i) {
    auto ring = std::make_unique<Ring>();
    io_uring_params params{};
    // SUBMIT_ALL: one bad SQE must not stop the rest of a batch from being
    // issued; its error arrives as a CQE like any other.
    params.flags = IORING_SETUP_SUBMIT_ALL;
    int ret = io_uring_queue_init_params(entries, &ring->uring, &params);
    if (ret == -EINVAL) {  // kernel older than 5.18
      params = io_uring_params{};
      ret = io_uring_queue_init_params(entries, &ring->uring, &params);
    }
    if (ret < 0) {
      return Status::Error(-ret, "io engine: io_uring_queue_init (" + std::to_string(entries) +
                                     " entries) for ring " + std::to_string(i));
    }
    ring->initialized = true;
    rings_.push_back(std::move(ring));
    io_uring* u = &rings_.back()->uring;
    // Registered files spare the kernel an fget/fput per command.
    ret = io_uring_register_files(u, fds.data(), static_cast<unsigned>(fds.size()));
    if (ret < 0) {
      return Status::Error(-ret, "io engine: io_uring_register_files on ring " + std::to_string(i));
    }
    // An empty table: regions are put in (and taken out) while running.
    // Empty iovecs rather than io_uring_register_buffers_sparse: that needs
    // Linux 5.19, this 5.13.
    std::vector<iovec> empty(kFixedSlots, iovec{nullptr, 0});
    std::vector<__u64> tags(kFixedSlots, 0);
    ret = io_uring_register_buffers_tags(u, empty.data(), tags.data(), kFixedSlots);
    if (ret < 0) {
      return Status::Error(-ret, "io engine: registering an empty buffer table on ring " +
                                     std::to_string(i));
    }
  }
  {
    WriterLock l(regions_mu_);
    slot_used_.assign(kFixedSlots, false);
  }
  if (pool_) {
    KVFS_RETURN_IF_ERROR(RegisterRegion(static_cast<const char*>(pool_->region()),
                                        pool_->region_bytes()));
  }
  for (unsigned i = 0; i < rings_.size(); ++i) {
    rings_[i]->thread = std::thread([this, i] { RunCompletions(i); });
  }
  threads_started_ = true;
  return Status::OK();
}

IoEngine::Impl::~Impl() {
  if (threads_started_) {
    {
      MutexLock l(drain_mu_);
      while (outstanding_.load(std::memory_order_acquire) != 0) drained_cv_.Wait(l);
    }
    // Nothing is queued or in flight now; a NOP with kStopTag ends each
    // completion thread without polling.
    for (auto& r : rings_) {
      {
        MutexLock l(r->mu);
        io_uring_sqe* sqe = io_uring_get_sqe(&r->uring);
        if (sqe == nullptr) {  // cannot happen with nothing in flight
          std::fprintf(stderr, "kvfs io engine: no SQE for the stop NOP\n");
          std::abort();
        }
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data64(sqe, kStopTag);
        FlushSq(*r);
      }
      Enter(*r, false);
    }
    for (auto& r : rings_) r->thread.join();
  }
  // queue_exit unregisters the buffers, so the pool may go after it.
  for (auto& r : rings_) {
    if (r->initialized) io_uring_queue_exit(&r->uring);
  }
  rings_.clear();
  pool_.reset();
}

Status IoEngine::Impl::Validate(const IoRequest& r) const {
  if (r.device >= devices_.size()) {
    return Status::Error(EINVAL, std::string(OpName(r.op)) + " names device " +
                                     std::to_string(r.device) + " but the engine has " +
                                     std::to_string(devices_.size()));
  }
  const BlockDevice& d = *devices_[r.device];
  switch (r.op) {
    case IoOp::kFlush:
      return Status::OK();
    case IoOp::kRead:
    case IoOp::kWrite:
      break;
    default:
      return Status::Error(EINVAL, d.path() + ": unknown I/O op " +
                                       std::to_string(static_cast<int>(r.op)));
  }
  if (r.len == 0 || r.len % kBlockSize != 0 || r.byte_off % kBlockSize != 0 ||
      r.buf == nullptr || reinterpret_cast<uintptr_t>(r.buf) % kBlockSize != 0) {
    char b[160];
    std::snprintf(b, sizeof(b), ": unaligned or empty %s (byte_off %llu, len %zu, buf %p)",
                  OpName(r.op), static_cast<unsigned long long>(r.byte_off), r.len, r.buf);
    return Status::Error(EINVAL, d.path() + b);
  }
  if (r.byte_off > d.size_bytes() || r.len > d.size_bytes() - r.byte_off) {
    return Status::Error(EINVAL, d.path() + ": " + OpName(r.op) + " of [" +
                                     std::to_string(r.byte_off) + ", " +
                                     std::to_string(r.byte_off + r.len) +
                                     ") is beyond the end of the device (" +
                                     std::to_string(d.size_bytes()) + " bytes)");
  }
  if (r.op == IoOp::kWrite && d.read_only()) {
    return Status::Error(EROFS, d.path() + ": write to a device opened read-only");
  }
  return Status::OK();
}

unsigned IoEngine::Impl::StartRing(uint32_t ncmds) {
  const unsigned n = static_cast<unsigned>(rings_.size());
  // A callback that submits follow-up work keeps it on its own ring while
  // that ring has room: the same thread issues and reaps it, with no wake-up
  // of another thread in between (this matters at low queue depth).
  if (tls_engine == this &&
      rings_[tls_ring]->load.load(std::memory_order_relaxed) + ncmds <= options_.queue_depth) {
    return tls_ring;
  }
  return static_cast<unsigned>(next_ring_.fetch_add(ncmds, std::memory_order_relaxed) % n);
}

void IoEngine::Impl::Submit(std::span<IoRequest> reqs) {
  if (reqs.empty()) return;
  outstanding_.fetch_add(reqs.size(), std::memory_order_relaxed);
  stat_requests_.fetch_add(reqs.size(), std::memory_order_relaxed);
  const unsigned nrings = static_cast<unsigned>(rings_.size());
  if (tls_batches.size() < nrings) tls_batches.resize(nrings);

  uint64_t ncommands = 0, nfixed = 0;
  ReaderLock regions(regions_mu_);
  for (IoRequest& r : reqs) {
    auto* q = new Request;
    q->done = std::move(r.done);
    Status bad = Validate(r);
    uint32_t ncmds = 1;
    if (bad.ok() && r.op != IoOp::kFlush) {
      ncmds = static_cast<uint32_t>((r.len + options_.max_command_bytes - 1) /
                                    options_.max_command_bytes);
    }
    if (ncmds == 1) {
      q->cmds = &q->inline_cmd;
    } else {
      q->more = std::make_unique<Command[]>(ncmds);
      q->cmds = q->more.get();
    }
    q->remaining.store(ncmds, std::memory_order_relaxed);
    unsigned start = StartRing(ncmds);
    for (uint32_t k = 0; k < ncmds; ++k) {
      Command& c = q->cmds[k];
      c.req = q;
      c.op = r.op;
      c.device = r.device;
      if (!bad.ok()) {
        c.invalid = true;
      } else if (r.op != IoOp::kFlush) {
        uint64_t off = uint64_t{k} * options_.max_command_bytes;
        c.buf = static_cast<char*>(r.buf) + off;
        c.byte_off = r.byte_off + off;
        c.len = static_cast<uint32_t>(std::min<uint64_t>(options_.max_command_bytes, r.len - off));
        c.fixed_slot = FixedSlotLocked(c.buf, c.len);
        nfixed += c.fixed_slot >= 0;
      }
      tls_batches[(start + k) % nrings].push_back(&c);
    }
    if (!bad.ok()) q->RecordError(std::move(bad));
    ncommands += ncmds;
  }
  stat_commands_.fetch_add(ncommands, std::memory_order_relaxed);
  stat_fixed_.fetch_add(nfixed, std::memory_order_relaxed);

  // One lock and one io_uring_enter per ring for the whole call.
  for (unsigned i = 0; i < nrings; ++i) {
    std::vector<Command*>& batch = tls_batches[i];
    if (batch.empty()) continue;
    Ring& ring = *rings_[i];
    bool enter;
    {
      MutexLock l(ring.mu);
      ring.pending.insert(ring.pending.end(), batch.begin(), batch.end());
      enter = Pump(ring);
    }
    batch.clear();
    if (!enter) continue;
    if (tls_engine == this && tls_ring == i) {
      tls_deferred_enter = true;  // this ring's thread enters when it next waits
    } else {
      Enter(ring, false);
    }
  }
}

void IoEngine::Impl::Prep(io_uring_sqe* sqe, Command* c) const {
  if (c->invalid) {
    io_uring_prep_nop(sqe);
  } else {
    char* buf = c->buf + c->done_bytes;
    unsigned len = c->len - c->done_bytes;
    uint64_t off = c->byte_off + c->done_bytes;
    int file = static_cast<int>(c->device);  // index into the registered files
    switch (c->op) {
      case IoOp::kRead:
        if (c->fixed_slot >= 0) {
          io_uring_prep_read_fixed(sqe, file, buf, len, off, c->fixed_slot);
        } else {
          io_uring_prep_read(sqe, file, buf, len, off);
        }
        break;
      case IoOp::kWrite:
        if (c->fixed_slot >= 0) {
          io_uring_prep_write_fixed(sqe, file, buf, len, off, c->fixed_slot);
        } else {
          io_uring_prep_write(sqe, file, buf, len, off);
        }
        break;
      case IoOp::kFlush:
        io_uring_prep_fsync(sqe, file, IORING_FSYNC_DATASYNC);
        break;
    }
    sqe->flags |= IOSQE_FIXED_FILE;
  }
  io_uring_sqe_set_data(sqe, c);
}

bool IoEngine::Impl::Pump(Ring& r) {
  unsigned prepared = 0;
  // The cap is checked before an SQE is taken: commands beyond it stay in
  // `pending` (FIFO) until completions free slots.
  while (r.inflight < options_.queue_depth && !r.pending.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&r.uring);
    if (sqe == nullptr) {
      // SQ full: it holds the cap, so only if published entries have not
      // been entered yet (a deferred enter). Hand them over and retry.
      FlushSq(r);
      Enter(r, false);
      sqe = io_uring_get_sqe(&r.uring);
      if (sqe == nullptr) break;  // left in pending; the next completion retries
    }
    Command* c = r.pending.front();
    r.pending.pop_front();
    Prep(sqe, c);
    ++r.inflight;
    ++prepared;
  }
  r.max_inflight = std::max(r.max_inflight, r.inflight);
  r.load.store(r.inflight + static_cast<unsigned>(r.pending.size()), std::memory_order_relaxed);
  if (prepared == 0 && !r.enter_failed.load(std::memory_order_relaxed)) return false;
  FlushSq(r);
  return true;
}

void IoEngine::Impl::FlushSq(Ring& r) {
  // What liburing's io_uring_submit() does before its syscall: make the
  // prepared SQEs visible by moving the SQ tail (the SQ array maps slot i
  // to SQE i since setup). Done under mu so that it never publishes an SQE
  // another thread is still filling in.
  io_uring_sq* sq = &r.uring.sq;
  unsigned tail = sq->sqe_tail;
  if (sq->sqe_head != tail) {
    sq->sqe_head = tail;
    __atomic_store_n(sq->ktail, tail, __ATOMIC_RELEASE);
  }
}

void IoEngine::Impl::Enter(Ring& r, bool wait) {
  const unsigned flags = wait ? IORING_ENTER_GETEVENTS : 0;
  for (int tries = 0;; ++tries) {
    // Exactly what is published and not yet consumed: the kernel skips the
    // wait when it submits fewer SQEs than asked. Another thread may enter
    // between these loads and the syscall; then this call submits less and
    // returns without waiting, and the caller loops.
    io_uring_sq* sq = &r.uring.sq;
    const unsigned to_submit = __atomic_load_n(sq->ktail, __ATOMIC_ACQUIRE) -
                               __atomic_load_n(sq->khead, __ATOMIC_ACQUIRE);
    int ret = io_uring_enter(r.uring.ring_fd, to_submit, wait ? 1 : 0, flags, nullptr);
    if (ret >= 0) {
      r.enter_failed.store(false, std::memory_order_relaxed);
      return;
    }
    if (ret == -EINTR) {
      if (wait) return;  // the caller loops; submission already happened or is retried
      continue;
    }
    if ((ret == -EAGAIN || ret == -EBUSY) && tries < 1000) {
      // Transient kernel resource shortage; the SQEs stay published.
      std::this_thread::yield();
      continue;
    }
    std::fprintf(stderr, "kvfs io engine: io_uring_enter: %s\n", std::strerror(-ret));
    if (wait) {
      // The completion thread cannot wait any more: commands in flight
      // could never complete and callers would hang silently.
      std::abort();
    }
    // The published SQEs stay in the ring; the next Pump() on this ring
    // enters again.
    r.enter_failed.store(true, std::memory_order_relaxed);
    return;
  }
}

Status IoEngine::Impl::CommandError(const Command& c, int err, const std::string& what) const {
  const BlockDevice& d = *devices_[c.device];
  std::string ctx = d.path() + ": " + OpName(c.op);
  if (c.op != IoOp::kFlush) {
    ctx += " of " + std::to_string(c.len - c.done_bytes) + " bytes at byte_off " +
           std::to_string(c.byte_off + c.done_bytes);
  }
  ctx += " " + what;
  return Status::Error(err, ctx);
}

void IoEngine::Impl::HandleCqe(Command* c, int res, std::vector<Command*>* retry,
                               std::vector<Request*>* finished) {
  Request* q = c->req;
  if (c->invalid) {
    // first_error was set by Submit().
  } else if (res < 0) {
    if (res == -EAGAIN && c->eagain_retries < kMaxEagainRetries) {
      ++c->eagain_retries;
      stat_eagain_.fetch_add(1, std::memory_order_relaxed);
      retry->push_back(c);
      return;
    }
    q->RecordError(CommandError(*c, -res, "failed"));
  } else if (c->op != IoOp::kFlush) {
    uint32_t want = c->len - c->done_bytes;
    uint32_t got = static_cast<uint32_t>(res);
    if (got == 0) {
      // A read at the end of a file returns 0: resubmitting would loop.
      q->RecordError(CommandError(*c, EIO, "made no progress (end of device?)"));
    } else if (got < want) {
      c->done_bytes += got;
      if (c->done_bytes % kBlockSize != 0) {
        // O_DIRECT cannot continue from an unaligned offset.
        q->RecordError(CommandError(*c, EIO, "stopped short at an unaligned offset"));
      } else {
        stat_short_.fetch_add(1, std::memory_order_relaxed);
        retry->push_back(c);
        return;
      }
    }
  }
  if (q->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) finished->push_back(q);
}

void IoEngine::Impl::Finish(Request* q) {
  {
    Status st;
    {
      MutexLock l(q->mu);
      st = std::move(q->first_error);
    }
    std::function<void(Status)> done = std::move(q->done);
    delete q;
    if (done) done(std::move(st));
    // `done` (and what it captured) is destroyed here, before the engine may
    // be told that nothing is outstanding.
  }
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    MutexLock l(drain_mu_);
    drained_cv_.NotifyAll();
  }
}

void IoEngine::Impl::RunCompletions(unsigned ring_index) {
  char name[16];
  std::snprintf(name, sizeof(name), "kvfs-io-%u", ring_index);
  pthread_setname_np(pthread_self(), name);
  tls_engine = this;
  tls_ring = ring_index;

  Ring& r = *rings_[ring_index];
  std::vector<Command*> retry;
  std::vector<Request*> finished;
  bool stop = false;
  bool enter = false;  // SQEs this thread published but did not enter
  while (!stop) {
    if (io_uring_cq_ready(&r.uring) == 0) {
      // Submit what this thread queued and sleep until a CQE arrives, in
      // one syscall. No polling: the destructor's NOP ends the wait.
      Enter(r, true);
      enter = false;
      continue;
    }
    if (enter) {
      Enter(r, false);
      enter = false;
    }
    io_uring_cqe* cqe = nullptr;
    unsigned head;
    unsigned seen = 0, commands = 0;
    {
      // CQEs are handled under mu although only this thread reaps: the
      // Command was written by the submitter before it took mu, and taking
      // it here makes that hand-off visible to tools like TSan, which do not
      // see the ordering the kernel provides. Handling is cheap (no
      // callbacks), so submitters wait only briefly.
      MutexLock l(r.mu);
      io_uring_for_each_cqe(&r.uring, head, cqe) {
        ++seen;
        if (cqe->user_data == kStopTag) {
          stop = true;
          continue;
        }
        ++commands;
        HandleCqe(static_cast<Command*>(io_uring_cqe_get_data(cqe)), cqe->res, &retry,
                  &finished);
      }
      io_uring_cq_advance(&r.uring, seen);
      r.inflight -= commands;
      // Remainders jump the queue: their requests are already under way.
      for (auto it = retry.rbegin(); it != retry.rend(); ++it) r.pending.push_front(*it);
      enter = Pump(r);
    }
    retry.clear();
    // Callbacks run holding no lock; they may Submit(). What they queue on
    // this ring is entered by this thread at the top of the loop.
    tls_deferred_enter = false;
    for (Request* q : finished) Finish(q);
    finished.clear();
    enter = enter || tls_deferred_enter;
  }
  if (enter) Enter(r, false);
  tls_engine = nullptr;
}

Result<std::unique_ptr<IoEngine>> IoEngine::Create(std::vector<const BlockDevice*> devices,
                                                   const IoEngineOptions& options) {
  auto impl = std::make_unique<Impl>(std::move(devices), options);
  KVFS_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<IoEngine>(new IoEngine(std::move(impl)));
}

IoEngine::IoEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
IoEngine::~IoEngine() = default;

void IoEngine::Submit(std::span<IoRequest> reqs) { impl_->Submit(reqs); }

uint32_t IoEngine::device_count() const { return static_cast<uint32_t>(impl_->devices_.size()); }

BufferPool& IoEngine::buffers() {
  if (!impl_->pool_) {
    std::fprintf(stderr, "kvfs io engine: buffers() called with the staging pool disabled\n");
    std::abort();
  }
  return *impl_->pool_;
}

const IoEngineOptions& IoEngine::options() const { return impl_->options_; }

Status IoEngine::RegisterRegion(const void* base, size_t len) {
  return impl_->RegisterRegion(static_cast<const char*>(base), len);
}
void IoEngine::UnregisterRegions(const void* base, size_t len) {
  impl_->UnregisterRegions(static_cast<const char*>(base), len);
}

Status IoEngine::Impl::RegisterRegion(const char* base, size_t len) {
  if (len == 0) return Status::OK();
  const unsigned pieces = PiecesOf(len);
  unsigned first = 0;
  {
    // Reserve the first run of `pieces` free slots. The lock is not held
    // while the kernel pins the pages (100+ ms for 64 MiB): every Submit()
    // takes it.
    WriterLock l(regions_mu_);
    unsigned run = 0;
    for (unsigned k = 0; k < kFixedSlots && run < pieces; ++k) {
      if (slot_used_[k]) {
        run = 0;
        first = k + 1;
      } else {
        ++run;
      }
    }
    if (run < pieces) {
      return Status::Error(ENOSPC, "io engine: no " + std::to_string(pieces) +
                                       " free registered-buffer slots");
    }
    for (unsigned k = first; k < first + pieces; ++k) slot_used_[k] = true;
  }
  std::vector<iovec> iovs;
  for (size_t off = 0; off < len; off += kFixedPieceBytes) {
    iovs.push_back(iovec{const_cast<char*>(base) + off, std::min(kFixedPieceBytes, len - off)});
  }
  Status st;
  size_t done = 0;
  for (; done < rings_.size(); ++done) {
    // The kernel updates slots one by one and says how many it did: fewer
    // than asked is a failure too (the rest were not pinned).
    int ret = io_uring_register_buffers_update_tag(&rings_[done]->uring, first, iovs.data(),
                                                   nullptr, pieces);
    if (ret != static_cast<int>(pieces)) {
      st = Status::Error(ret < 0 ? -ret : ENOMEM, "io engine: registering " + std::to_string(len) +
                                                      " bytes of buffers (RLIMIT_MEMLOCK?)");
      ++done;  // this ring may hold some of the slots: cleared below
      break;
    }
  }
  if (!st.ok()) ClearSlots(first, pieces, done);  // a region is in all rings or none
  WriterLock l(regions_mu_);
  if (st.ok()) {
    regions_.push_back({base, len, first});  // commands may use it from now on
  } else {
    for (unsigned k = first; k < first + pieces; ++k) slot_used_[k] = false;
  }
  return st;
}

void IoEngine::Impl::ClearSlots(unsigned first, unsigned pieces, size_t nrings) {
  std::vector<iovec> empty(pieces, iovec{nullptr, 0});
  for (size_t j = 0; j < nrings; ++j) {
    io_uring_register_buffers_update_tag(&rings_[j]->uring, first, empty.data(), nullptr, pieces);
  }
}

void IoEngine::Impl::UnregisterRegions(const char* base, size_t len) {
  WriterLock l(regions_mu_);
  for (auto it = regions_.begin(); it != regions_.end();) {
    if (it->base < base || it->base >= base + len) {
      ++it;
      continue;
    }
    const unsigned pieces = PiecesOf(it->len);
    ClearSlots(it->first_slot, pieces, rings_.size());
    for (unsigned k = it->first_slot; k < it->first_slot + pieces; ++k) slot_used_[k] = false;
    it = regions_.erase(it);
  }
}

IoEngineStats IoEngine::stats() const {
  IoEngineStats s;
  s.requests = impl_->stat_requests_.load(std::memory_order_relaxed);
  s.commands = impl_->stat_commands_.load(std::memory_order_relaxed);
  s.fixed_commands = impl_->stat_fixed_.load(std::memory_order_relaxed);
  s.short_transfers = impl_->stat_short_.load(std::memory_order_relaxed);
  s.eagain_retries = impl_->stat_eagain_.load(std::memory_order_relaxed);
  for (auto& r : impl_->rings_) {
    MutexLock l(r->mu);
    s.max_ring_inflight = std::max<uint64_t>(s.max_ring_inflight, r->max_inflight);
  }
  return s;
}

}  // namespace kvfs::device
