// WriteGateIo: a BlockIo around the real engine that a test uses to hold
// device writes back (Hold/Release) or fail them with EIO (FailWrites), so it
// can check what is committed before the data is on the device; reads are
// held only after HoldReads(). Flushes always pass.
#pragma once

#include <cerrno>
#include <algorithm>
#include <iterator>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "device/block_io.h"

namespace kvfs::testing {

class WriteGateIo : public device::BlockIo {
 public:
  explicit WriteGateIo(device::BlockIo& inner) : inner_(inner) {}
  void Submit(std::span<device::IoRequest> reqs) override {
    std::vector<device::IoRequest> pass, fail;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& r : reqs) {
        if (r.op == device::IoOp::kRead && hold_reads_) {
          held_.push_back(std::move(r));
        } else if (r.op != device::IoOp::kWrite) {
          pass.push_back(std::move(r));
        } else if (fail_) {
          fail.push_back(std::move(r));
        } else if (hold_) {
          held_.push_back(std::move(r));
        } else {
          pass.push_back(std::move(r));
        }
      }
    }
    if (!pass.empty()) inner_.Submit(pass);
    // Completions come from another thread, as the engine's do.
    if (!fail.empty()) {
      std::thread([fail = std::move(fail)]() mutable {
        for (auto& r : fail) r.done(Status::Error(EIO, "injected"));
      }).detach();
    }
  }
  uint32_t device_count() const override { return inner_.device_count(); }
  // Writes submitted from now on wait for Release().
  void Hold() {
    std::lock_guard<std::mutex> l(mu_);
    hold_ = true;
  }
  // Reads submitted from now on wait for Release() too.
  void HoldReads() {
    std::lock_guard<std::mutex> l(mu_);
    hold_reads_ = true;
  }
  // Writes submitted from now on fail with EIO (while `on`).
  void FailWrites(bool on) {
    std::lock_guard<std::mutex> l(mu_);
    fail_ = on;
  }
  size_t held() {
    std::lock_guard<std::mutex> l(mu_);
    return held_.size();
  }
  // Sends the first `n` held writes on (in the order they were held); the
  // rest, and writes submitted from now on, stay held.
  void ReleaseFirst(size_t n) {
    std::vector<device::IoRequest> go;
    {
      std::lock_guard<std::mutex> l(mu_);
      n = std::min(n, held_.size());
      go.assign(std::make_move_iterator(held_.begin()),
                std::make_move_iterator(held_.begin() + static_cast<std::ptrdiff_t>(n)));
      held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(n));
    }
    if (!go.empty()) inner_.Submit(go);
  }
  // Sends the held writes on and stops holding.
  void Release() {
    std::vector<device::IoRequest> go;
    {
      std::lock_guard<std::mutex> l(mu_);
      hold_ = false;
      hold_reads_ = false;
      go.swap(held_);
    }
    if (!go.empty()) inner_.Submit(go);
  }

 private:
  device::BlockIo& inner_;
  std::mutex mu_;
  bool hold_ = false;                    // GUARDED_BY(mu_)
  bool fail_ = false;                    // GUARDED_BY(mu_)
  bool hold_reads_ = false;              // GUARDED_BY(mu_)
  std::vector<device::IoRequest> held_;  // GUARDED_BY(mu_)
};

}  // namespace kvfs::testing
