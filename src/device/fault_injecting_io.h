// FaultInjectingIo: a BlockIo that wraps another one (normally the real
// IoEngine) to make it fail on purpose, for tests of the parts above device/.
//
//   * FailRange(): reads or writes overlapping a byte range of one device fail
//     with a chosen errno without reaching the inner BlockIo (kFlush: every
//     flush of that device fails).
//   * Power-cut simulation, after EnablePowerCutMode(): writes are held in a
//     volatile in-memory "device cache" (the overlay) and complete at once;
//     reads see them (read from the inner device, then patched with overlay
//     bytes); a kFlush first writes down, in completion order, every held
//     write whose `done` ran before the flush was submitted, then flushes the
//     inner device. PowerCut() drops whatever is still held and fails every
//     later request, and any still running, with EIO: what reaches the
//     device afterwards is exactly what a power loss would have left.
//
//   FaultInjectingIo io(*engine);
//   io.EnablePowerCutMode();
//   io.WriteSync(0, a_off, a, n);  io.FlushSync(0);   // a is durable
//   io.WriteSync(0, b_off, b, n);                     // b only in the cache
//   io.PowerCut();                                    // b is gone
//
// Every request's `done` runs exactly once, never inside Submit(): either on
// a thread of the inner BlockIo or on the wrapper's own completion thread.
//
// Thread safety: all methods may be called from any thread. `inner` must
// outlive the wrapper. The destructor waits until every request submitted
// through the wrapper has completed; it must not run inside a `done`.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "device/block_io.h"

namespace kvfs::device {

class FaultInjectingIo : public BlockIo {
 public:
  explicit FaultInjectingIo(BlockIo& inner);
  ~FaultInjectingIo() override;
  FaultInjectingIo(const FaultInjectingIo&) = delete;
  FaultInjectingIo& operator=(const FaultInjectingIo&) = delete;

  void Submit(std::span<IoRequest> reqs) override;
  uint32_t device_count() const override { return inner_.device_count(); }

  // From now on, `op` requests on `device` that overlap [byte_off,
  // byte_off + len) fail with `err` (positive errno) and are not passed
  // down. For kFlush the range is ignored: every flush of `device` fails.
  void FailRange(IoOp op, uint32_t device, uint64_t byte_off, uint64_t len, int err = EIO);
  // Removes every FailRange() rule.
  void ClearFaults();

  // Starts holding writes in the volatile overlay (see the top of the file).
  void EnablePowerCutMode();
  // Drops the overlay and fails every later or still-running request with
  // EIO. Irreversible for this wrapper; reopen the device to "power on".
  void PowerCut();

  // Requests of `op` seen by Submit(), failed or not.
  uint64_t requests_seen(IoOp op) const;
  // Requests failed by a FailRange() rule or by PowerCut().
  uint64_t requests_failed() const;
  // Writes currently held in the overlay and not yet written down.
  size_t volatile_writes() const;

  // Implementation details follow.
 private:
  struct FreeDeleter {
    void operator()(char* p) const;
  };
  struct Fault {
    IoOp op;
    uint32_t device;
    uint64_t byte_off;
    uint64_t len;
    int err;
  };
  // A write held in the volatile overlay.
  struct HeldWrite {
    uint64_t seq = 0;  // submission order
    uint32_t device = 0;
    uint64_t byte_off = 0;
    uint64_t len = 0;
    std::unique_ptr<char, FreeDeleter> data;  // kBlockSize aligned copy
    // Guarded by FaultInjectingIo::mu_ (a nested type cannot name it for
    // the analysis).
    bool completed = false;  // its `done` has run
    bool durable = false;    // written down by a flush
  };
  struct PendingFlush {
    uint32_t device = 0;
    std::vector<std::shared_ptr<HeldWrite>> covered;  // in seq order
    std::function<void(Status)> done;
  };
  // One flush being written down: its writes are issued in waves of
  // non-overlapping writes so that later data lands after earlier data.
  struct ActiveFlush {
    PendingFlush flush;
    std::vector<std::vector<std::shared_ptr<HeldWrite>>> waves;
    size_t next_wave = 0;
    std::atomic<size_t> wave_left{0};
    Mutex mu;
    Status error GUARDED_BY(mu);
  };

  // Runs `done(st)` and marks the request finished. Call holding no lock.
  void Complete(std::function<void(Status)>& done, Status st);
  // Queues `done(st)` for the wrapper's completion thread.
  void CompleteLater(std::function<void(Status)> done, Status st);
  void CompletionLoop();
  // The errno of the first matching FailRange() rule, or 0.
  int FaultFor(const IoRequest& r) const REQUIRES(mu_);
  void SubmitRead(IoRequest& r, std::vector<IoRequest>* down);
  void HoldWrite(IoRequest& r);
  void StartNextFlush() EXCLUDES(mu_);
  void IssueWave(std::shared_ptr<ActiveFlush> f);
  void FinishFlush(std::shared_ptr<ActiveFlush> f, Status st);
  void PruneDurable() REQUIRES(mu_);

  BlockIo& inner_;

  // Lock order: taken before ActiveFlush::mu; never held while calling
  // inner_.Submit() or a `done`.
  mutable Mutex mu_;
  std::vector<Fault> faults_ GUARDED_BY(mu_);
  bool power_cut_mode_ GUARDED_BY(mu_) = false;
  std::deque<std::shared_ptr<HeldWrite>> overlay_ GUARDED_BY(mu_);  // seq order
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  uint64_t reads_in_flight_ GUARDED_BY(mu_) = 0;
  std::deque<PendingFlush> flushes_ GUARDED_BY(mu_);
  bool flush_running_ GUARDED_BY(mu_) = false;
  std::atomic<bool> cut_{false};

  std::array<std::atomic<uint64_t>, 3> seen_{};
  std::atomic<uint64_t> failed_{0};

  // Completion thread for requests that never reach inner_.
  Mutex cq_mu_;
  CondVar cq_cv_;
  std::deque<std::pair<std::function<void(Status)>, Status>> cq_ GUARDED_BY(cq_mu_);
  bool cq_stop_ GUARDED_BY(cq_mu_) = false;

  // Requests whose `done` has not returned; the destructor waits for 0.
  Mutex outstanding_mu_;
  CondVar outstanding_cv_;
  uint64_t outstanding_ GUARDED_BY(outstanding_mu_) = 0;

  std::thread cq_thread_;  // last: started once everything above exists
};

}  // namespace kvfs::device
