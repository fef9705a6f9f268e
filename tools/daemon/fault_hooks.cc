#include "daemon/fault_hooks.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cerrno>

#include "common/rule_list.h"

#include "daemon/mount_options.h"

namespace kvfs::daemon {

std::vector<MountOption> FaultOptionTable() {
  std::vector<MountOption> t;
  t.push_back(Flag("fault_injection", true, [](auto& o) -> auto& { return o.faults.power_cut; },
                   "tests only: device writes stay in a simulated volatile cache until flushed; "
                   "SIGUSR1 cuts the power (drops them and fails all later I/O with EIO)"));
  t.push_back(Text("fault_eio", "RULE[/...]", [](auto& o) -> auto& { return o.faults.eio; },
                   "tests only: device I/O overlapping a rule's byte range fails with EIO; RULE "
                   "is OP:OFFSET:LEN[:DEVICE], OP one of read, write, flush; DEVICE counts "
                   "from 0, 0 if left out"));
  t.push_back(FlagOrText(
      "shape", "RULE[/...]", [](auto& o) -> auto& { return o.faults.shape; },
      "tests and benchmarks: each device completes commands as an NVMe drive would (80 us per "
      "command, 2000 MB/s); RULE is LAT_US:MB_S[:DEVICE], DEVICE counts from 0"));
  return t;
}

Result<std::vector<FaultRule>> ParseFaultRules(const std::string& spec, size_t devices) {
  std::vector<FaultRule> rules;
  for (const Rule& rule : SplitRules(spec)) {
    const std::vector<std::string>& f = rule.fields;
    auto bad = [&](const char* why) {
      return BadRule("fault_eio", rule, why, "OP:OFFSET:LEN[:DEVICE]");
    };
    if (f.size() != 3 && f.size() != 4) return bad("wrong number of fields");
    FaultRule r;
    if (f[0] == "read") {
      r.op = device::IoOp::kRead;
    } else if (f[0] == "write") {
      r.op = device::IoOp::kWrite;
    } else if (f[0] == "flush") {
      r.op = device::IoOp::kFlush;
    } else {
      return bad("OP must be read, write or flush");
    }
    if (!ParseRuleNumber(f[1], &r.byte_off, /*hex=*/true)) return bad("OFFSET is not a number");
    if (!ParseRuleNumber(f[2], &r.len, /*hex=*/true)) return bad("LEN is not a number");
    if (r.len == 0 && r.op != device::IoOp::kFlush) return bad("LEN must not be 0");
    if (f.size() == 4) {
      uint64_t d = 0;
      if (!ParseRuleNumber(f[3], &d)) return bad("DEVICE is not a number");
      if (d >= devices) return bad("DEVICE past the last device");
      r.device = static_cast<uint32_t>(d);
    }
    rules.push_back(r);
  }
  return rules;
}

Result<std::unique_ptr<FaultHooks>> FaultHooks::Create(const FaultOptions& options,
                                                       size_t devices) {
  std::unique_ptr<FaultHooks> h(new FaultHooks());
  h->power_cut_ = options.power_cut;
  if (!options.eio.empty()) {
    KVFS_ASSIGN_OR_RETURN(h->rules_, ParseFaultRules(options.eio, devices));
  }
  if (options.shape) {
    const auto count = static_cast<uint32_t>(devices);
    KVFS_ASSIGN_OR_RETURN(h->shapes_, device::ParseDeviceShapes(*options.shape, count));
  }
  return h;
}

FaultHooks::~FaultHooks() { Disarm(); }

void FaultHooks::Install(volume::VolumeOptions& vopt) {
  vopt.shapes = shapes_;
  if (!power_cut_ && rules_.empty()) return;
  if (power_cut_) {
    // Only the thread Arm() starts may take SIGUSR1: every thread made
    // after this inherits the mask.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
  vopt.wrap_io = [this](device::BlockIo& inner) {
    auto io = std::make_unique<device::FaultInjectingIo>(inner);
    if (power_cut_) io->EnablePowerCutMode();
    for (const FaultRule& r : rules_) io->FailRange(r.op, r.device, r.byte_off, r.len, EIO);
    io_ = io.get();
    return io;
  };
}

void FaultHooks::LogActive() const {
  for (size_t d = 0; d < shapes_.size(); ++d) {
    spdlog::warn("shape: device {} modelled as {} us per command, {} MB/s (test hook)", d,
                 shapes_[d].latency_ns / 1000, shapes_[d].bytes_per_s / 1'000'000);
  }
  if (!rules_.empty()) {
    spdlog::warn("fault_eio: {} failing device range(s) injected (test hook)", rules_.size());
  }
}

void FaultHooks::Arm() {
  if (!power_cut_) return;
  thread_ = std::thread([this] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {
    }
    if (stopping_) return;
    spdlog::warn("SIGUSR1: power cut (fault injection): unflushed writes dropped");
    io_->PowerCut();
  });
}

void FaultHooks::Disarm() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  pthread_kill(thread_.native_handle(), SIGUSR1);
  thread_.join();
}

}  // namespace kvfs::daemon
