#include "device/fault_injecting_io.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "common/format.h"

namespace kvfs::device {

namespace {

bool Overlaps(uint64_t a_off, uint64_t a_len, uint64_t b_off, uint64_t b_len) {
  return a_off < b_off + b_len && b_off < a_off + a_len;
}

Status PowerCutError() { return Status::Error(EIO, "simulated power cut"); }

// What the inner engine would accept as a data request; anything else is
// passed down unchanged so that it fails there, with the engine's errno.
bool WellFormed(const IoRequest& r, uint32_t device_count) {
  return r.device < device_count && r.len > 0 && r.len % kBlockSize == 0 &&
         r.byte_off % kBlockSize == 0 && r.buf != nullptr &&
         reinterpret_cast<uintptr_t>(r.buf) % kBlockSize == 0;
}

}  // namespace

void FaultInjectingIo::FreeDeleter::operator()(char* p) const { std::free(p); }

FaultInjectingIo::FaultInjectingIo(BlockIo& inner) : inner_(inner) {
  cq_thread_ = std::thread([this] { CompletionLoop(); });
}

FaultInjectingIo::~FaultInjectingIo() {
  {
    MutexLock l(outstanding_mu_);
    while (outstanding_ != 0) outstanding_cv_.Wait(l);
  }
  {
    MutexLock l(cq_mu_);
    cq_stop_ = true;
  }
  cq_cv_.NotifyAll();
  cq_thread_.join();
}

void FaultInjectingIo::FailRange(IoOp op, uint32_t device, uint64_t byte_off, uint64_t len,
                                 int err) {
  MutexLock l(mu_);
  faults_.push_back(Fault{op, device, byte_off, len, err});
}

void FaultInjectingIo::ClearFaults() {
  MutexLock l(mu_);
  faults_.clear();
}

void FaultInjectingIo::EnablePowerCutMode() {
  MutexLock l(mu_);
  power_cut_mode_ = true;
}

void FaultInjectingIo::PowerCut() {
  MutexLock l(mu_);
  cut_.store(true);
  // A flush that is writing entries down keeps them alive through its own
  // references until its inner writes finish; they may or may not land, as
  // with a real power loss during a flush.
  overlay_.clear();
}

uint64_t FaultInjectingIo::requests_seen(IoOp op) const {
  return seen_[static_cast<size_t>(op)].load();
}

uint64_t FaultInjectingIo::requests_failed() const { return failed_.load(); }

size_t FaultInjectingIo::volatile_writes() const {
  MutexLock l(mu_);
  return static_cast<size_t>(std::count_if(overlay_.begin(), overlay_.end(),
                                           [](const auto& w) { return !w->durable; }));
}

void FaultInjectingIo::Complete(std::function<void(Status)>& done, Status st) {
  if (done) done(std::move(st));
  done = nullptr;  // destroy captures before the destructor may proceed
  MutexLock l(outstanding_mu_);
  if (--outstanding_ == 0) outstanding_cv_.NotifyAll();
}

void FaultInjectingIo::CompleteLater(std::function<void(Status)> done, Status st) {
  {
    MutexLock l(cq_mu_);
    cq_.emplace_back(std::move(done), std::move(st));
  }
  cq_cv_.NotifyOne();
}

void FaultInjectingIo::CompletionLoop() {
  MutexLock l(cq_mu_);
  for (;;) {
    while (!cq_stop_ && cq_.empty()) cq_cv_.Wait(l);
    if (cq_.empty()) return;  // stop requested and nothing left
    auto [done, st] = std::move(cq_.front());
    cq_.pop_front();
    l.Unlock();
    Complete(done, std::move(st));
    l.Lock();
  }
}

int FaultInjectingIo::FaultFor(const IoRequest& r) const {
  for (const Fault& f : faults_) {
    if (f.op != r.op || f.device != r.device) continue;
    if (r.op == IoOp::kFlush || Overlaps(f.byte_off, f.len, r.byte_off, r.len)) return f.err;
  }
  return 0;
}

void FaultInjectingIo::Submit(std::span<IoRequest> reqs) {
  if (reqs.empty()) return;
  {
    MutexLock l(outstanding_mu_);
    outstanding_ += reqs.size();
  }
  std::vector<IoRequest> down;
  bool start_flush = false;
  for (IoRequest& r : reqs) {
    seen_[static_cast<size_t>(r.op)].fetch_add(1);
    if (cut_.load()) {
      failed_.fetch_add(1);
      CompleteLater(std::move(r.done), PowerCutError());
      continue;
    }
    MutexLock l(mu_);
    if (int err = FaultFor(r); err != 0) {
      l.Unlock();
      failed_.fetch_add(1);
      CompleteLater(std::move(r.done),
                    Status::Error(err, "injected fault: " +
                                           std::string(r.op == IoOp::kRead    ? "read"
                                                       : r.op == IoOp::kWrite ? "write"
                                                                              : "flush") +
                                           " of device " + std::to_string(r.device) +
                                           " at byte_off " + std::to_string(r.byte_off)));
      continue;
    }
    if (power_cut_mode_ && r.op == IoOp::kWrite && WellFormed(r, inner_.device_count())) {
      // Hold the write in the volatile cache; it "completes" at once.
      auto w = std::make_shared<HeldWrite>();
      w->seq = next_seq_++;
      w->device = r.device;
      w->byte_off = r.byte_off;
      w->len = r.len;
      w->data.reset(static_cast<char*>(std::aligned_alloc(kBlockSize, r.len)));
      std::memcpy(w->data.get(), r.buf, r.len);
      overlay_.push_back(w);
      l.Unlock();
      CompleteLater(
          [this, w, user = std::move(r.done)](Status st) mutable {
            {
              MutexLock g(mu_);
              w->completed = true;  // from here a flush covers it
            }
            if (cut_.load()) {
              failed_.fetch_add(1);
              st = PowerCutError();
            }
            if (user) user(std::move(st));
          },
          Status::OK());
      continue;
    }
    if (power_cut_mode_ && r.op == IoOp::kFlush && r.device < inner_.device_count()) {
      PendingFlush pf;
      pf.device = r.device;
      for (const auto& w : overlay_) {
        if (w->device == r.device && w->completed && !w->durable) pf.covered.push_back(w);
      }
      pf.done = std::move(r.done);
      flushes_.push_back(std::move(pf));
      if (!flush_running_) {
        flush_running_ = true;
        start_flush = true;
      }
      continue;
    }
    // Passed down: reads (patched with held writes in power-cut mode),
    // writes and flushes outside power-cut mode, and malformed requests.
    uint64_t snapshot = 0;
    if (power_cut_mode_ && r.op == IoOp::kRead) {
      snapshot = next_seq_;
      ++reads_in_flight_;
    }
    l.Unlock();
    IoRequest d = r;
    d.done = [this, user = std::move(r.done), snapshot, dev = r.device, off = r.byte_off,
              len = r.len, buf = static_cast<char*>(r.buf)](Status st) mutable {
      if (snapshot != 0) {
        MutexLock g(mu_);
        if (st.ok()) {
          // Read-your-writes: held writes submitted before this read, in
          // order, over what the device returned.
          for (const auto& w : overlay_) {
            if (w->seq >= snapshot) break;
            if (w->device != dev || !Overlaps(w->byte_off, w->len, off, len)) continue;
            uint64_t from = std::max(w->byte_off, off);
            uint64_t to = std::min(w->byte_off + w->len, off + len);
            std::memcpy(buf + (from - off), w->data.get() + (from - w->byte_off), to - from);
          }
        }
        if (--reads_in_flight_ == 0) PruneDurable();
      }
      if (cut_.load()) {
        failed_.fetch_add(1);
        st = PowerCutError();
      }
      Complete(user, std::move(st));
    };
    down.push_back(std::move(d));
  }
  if (!down.empty()) inner_.Submit(down);
  if (start_flush) StartNextFlush();
}

void FaultInjectingIo::PruneDurable() {
  // Written-down entries stay while reads are in flight: such a read may
  // have fetched the device before the write landed and still needs them.
  if (reads_in_flight_ != 0) return;
  std::erase_if(overlay_, [](const auto& w) { return w->durable; });
}

void FaultInjectingIo::StartNextFlush() {
  auto f = std::make_shared<ActiveFlush>();
  {
    MutexLock l(mu_);
    f->flush = std::move(flushes_.front());
    flushes_.pop_front();
    // Waves of mutually non-overlapping writes, in seq order: a write that
    // overlaps one already in the wave must wait for the wave to land.
    std::vector<std::shared_ptr<HeldWrite>> wave;
    for (const auto& w : f->flush.covered) {
      if (w->durable) continue;  // an earlier flush wrote it down
      bool clash = std::any_of(wave.begin(), wave.end(), [&](const auto& o) {
        return Overlaps(o->byte_off, o->len, w->byte_off, w->len);
      });
      if (clash) f->waves.push_back(std::move(wave)), wave.clear();
      wave.push_back(w);
    }
    if (!wave.empty()) f->waves.push_back(std::move(wave));
  }
  if (cut_.load()) {
    FinishFlush(f, PowerCutError());
    return;
  }
  IssueWave(f);
}

void FaultInjectingIo::IssueWave(std::shared_ptr<ActiveFlush> f) {
  if (f->next_wave == f->waves.size()) {
    // Everything covered is on the device: now make it durable there.
    IoRequest req;
    req.op = IoOp::kFlush;
    req.device = f->flush.device;
    req.done = [this, f](Status st) { FinishFlush(f, std::move(st)); };
    inner_.Submit(std::span<IoRequest>(&req, 1));
    return;
  }
  const auto& wave = f->waves[f->next_wave++];
  f->wave_left.store(wave.size());
  std::vector<IoRequest> reqs;
  for (const auto& w : wave) {
    IoRequest req;
    req.op = IoOp::kWrite;
    req.device = w->device;
    req.byte_off = w->byte_off;
    req.buf = w->data.get();
    req.len = w->len;
    req.done = [this, f](Status st) {
      if (!st.ok()) {
        MutexLock g(f->mu);
        if (f->error.ok()) f->error = std::move(st);
      }
      if (f->wave_left.fetch_sub(1) != 1) return;
      Status err;
      {
        MutexLock g(f->mu);
        err = f->error;
      }
      if (!err.ok() || cut_.load()) {
        FinishFlush(f, err.ok() ? PowerCutError() : err);
        return;
      }
      {
        MutexLock g(mu_);
        for (const auto& done_w : f->waves[f->next_wave - 1]) done_w->durable = true;
      }
      IssueWave(f);
    };
    reqs.push_back(std::move(req));
  }
  inner_.Submit(reqs);
}

void FaultInjectingIo::FinishFlush(std::shared_ptr<ActiveFlush> f, Status st) {
  if (cut_.load()) {
    st = PowerCutError();
    failed_.fetch_add(1);
  }
  bool more;
  {
    MutexLock l(mu_);
    PruneDurable();
    more = !flushes_.empty();
    if (!more) flush_running_ = false;
  }
  // A queued flush keeps outstanding_ above zero, so `this` stays valid for
  // StartNextFlush() after this request's Complete().
  Complete(f->flush.done, std::move(st));
  if (more) StartNextFlush();
}

}  // namespace kvfs::device
