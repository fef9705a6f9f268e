#include "device/shaped_io.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "common/rule_list.h"

namespace kvfs::device {

Result<std::vector<DeviceShape>> ParseDeviceShapes(const std::string& spec, uint32_t devices) {
  std::vector<DeviceShape> all(devices);
  if (spec.empty()) return all;
  std::vector<std::pair<uint32_t, DeviceShape>> overrides;
  for (const Rule& rule : SplitRules(spec)) {
    const std::vector<std::string>& f = rule.fields;
    auto bad = [&](const char* why) { return BadRule("shape", rule, why, "LAT_US:MB_S[:DEVICE]"); };
    if (f.size() != 2 && f.size() != 3) return bad("wrong number of fields");
    uint64_t lat_us = 0, mbps = 0, dev = 0;
    if (!ParseRuleNumber(f[0], &lat_us) || lat_us > 1'000'000) {
      return bad("LAT_US is not 0..1000000");
    }
    if (!ParseRuleNumber(f[1], &mbps) || mbps == 0 || mbps > 1'000'000) {
      return bad("MB_S is not 1..1000000");
    }
    DeviceShape s{lat_us * 1000, mbps * 1'000'000};
    if (f.size() == 3) {
      if (!ParseRuleNumber(f[2], &dev) || dev >= devices) {
        return bad("DEVICE past the last device");
      }
      overrides.emplace_back(static_cast<uint32_t>(dev), s);
    } else {
      for (auto& d : all) d = s;
    }
  }
  for (const auto& [d, s] : overrides) all[d] = s;
  return all;
}

ShapedIo::ShapedIo(BlockIo& inner, std::vector<DeviceShape> shapes,
                   std::function<uint64_t()> now_ns)
    : inner_(inner), shapes_(std::move(shapes)), now_ns_(std::move(now_ns)) {
  shapes_.resize(inner_.device_count());
  pipe_free_ns_.assign(shapes_.size(), 0);
  timer_ = std::thread([this] { TimerLoop(); });
}

ShapedIo::~ShapedIo() {
  MutexLock l(mu_);
  while (outstanding_ != 0) idle_cv_.Wait(l);
  stop_ = true;
  cv_.NotifyAll();
  l.Unlock();
  timer_.join();
}

uint64_t ShapedIo::NowNs() const {
  if (now_ns_) return now_ns_();
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void ShapedIo::ClockMoved() {
  MutexLock l(mu_);
  cv_.NotifyAll();
  const uint64_t now = NowNs();
  while (!due_.empty() && due_.top().at_ns <= now) {
    Due d = PopDue();
    l.Unlock();
    d.done(std::move(d.st));
    l.Lock();
    DoneReturned();
  }
  while (calling_ > 0) idle_cv_.Wait(l);  // the timer's, popped before
}

ShapedIo::Due ShapedIo::PopDue() {
  Due d = std::move(const_cast<Due&>(due_.top()));
  due_.pop();
  ++calling_;
  return d;
}

void ShapedIo::DoneReturned() {
  --calling_;
  --outstanding_;
  idle_cv_.NotifyAll();
}

void ShapedIo::Finish(std::function<void(Status)>& done, Status st) {
  done(std::move(st));
  MutexLock l(mu_);
  if (--outstanding_ == 0) idle_cv_.NotifyAll();
}

void ShapedIo::Submit(std::span<IoRequest> reqs) {
  const uint64_t now = NowNs();
  {
    MutexLock l(mu_);
    outstanding_ += reqs.size();
    for (IoRequest& r : reqs) {
      uint64_t due = now;
      if (r.device < shapes_.size()) {
        const DeviceShape& s = shapes_[r.device];
        uint64_t& pipe = pipe_free_ns_[r.device];
        uint64_t xfer = r.op == IoOp::kFlush
                            ? 0
                            : static_cast<uint64_t>(static_cast<unsigned __int128>(r.len) *
                                                    1'000'000'000ull / s.bytes_per_s);
        pipe = std::max(pipe, now) + xfer;
        due = pipe + s.latency_ns;
      }
      r.done = [this, due, done = std::move(r.done)](Status st) mutable {
        if (NowNs() >= due) {
          Finish(done, std::move(st));
          return;
        }
        MutexLock l(mu_);
        bool first = due_.empty() || due < due_.top().at_ns;
        due_.push(Due{due, std::move(done), std::move(st)});
        if (first) cv_.NotifyOne();
      };
    }
  }
  inner_.Submit(reqs);
}

void ShapedIo::TimerLoop() {
  // The default 50 us timer slack is most of a modelled command's latency.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  MutexLock l(mu_);
  for (;;) {
    if (due_.empty()) {
      if (stop_) return;
      cv_.Wait(l);
      continue;
    }
    const uint64_t at = due_.top().at_ns;
    const uint64_t now = NowNs();
    if (now < at) {
      cv_.WaitFor(l, std::chrono::nanoseconds(at - now));
      continue;
    }
    Due d = PopDue();
    l.Unlock();
    d.done(std::move(d.st));
    l.Lock();
    DoneReturned();
  }
}

}  // namespace kvfs::device
