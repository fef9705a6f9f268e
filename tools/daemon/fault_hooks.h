// The daemon's test hooks, set with -o and never used on a volume whose data
// matters:
//   fault_injection  device writes stay in a simulated volatile cache until
//                    flushed; SIGUSR1 cuts the power (FaultInjectingIo's
//                    power-cut mode);
//   fault_eio=RULE[/RULE...]  device I/O overlapping a rule's byte range
//                    fails with EIO, a rule being OP:OFFSET:LEN[:DEVICE]
//                    ('/' separates rules because libfuse splits -o at
//                    commas);
//   shape[=RULE[/...]]  image files complete commands as NVMe drives would
//                    (device/shaped_io.h).
//
//   FaultOptions f;  ... filled by -o (FaultOptionTable) ...
//   KVFS_ASSIGN_OR_RETURN(auto hooks, FaultHooks::Create(f, devices.size()));
//   hooks->Install(vopt);        // before any thread exists
//   ... open the volume ...
//   hooks->Arm();                // SIGUSR1 now cuts the power
//   ... serve ...
//   hooks->Disarm();             // before the volume closes
//
// Thread safety: all calls from main's thread; the signal is taken by
// sigwait() on a thread of its own (PowerCut() takes locks, so it cannot
// run in a signal handler).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "daemon/option_spec.h"
#include "device/fault_injecting_io.h"
#include "device/shaped_io.h"
#include "volume/volume.h"

namespace kvfs::daemon {

struct FaultOptions {
  bool power_cut = false;            // -o fault_injection
  std::string eio;                   // -o fault_eio=RULE[/...]; empty: none
  std::optional<std::string> shape;  // -o shape[=RULE[/...]]; nullopt: real speed
};

// The -o entries of the hooks above, for the daemon's option table.
std::vector<MountOption> FaultOptionTable();

// One failing range of -o fault_eio.
struct FaultRule {
  device::IoOp op = device::IoOp::kRead;
  uint32_t device = 0;
  uint64_t byte_off = 0;
  uint64_t len = 0;
};

// Parses "OP:OFFSET:LEN[:DEVICE][/...]" (numbers decimal or 0x hex; DEVICE
// from 0, below `devices`). EINVAL naming the bad rule.
Result<std::vector<FaultRule>> ParseFaultRules(const std::string& spec, size_t devices);

class FaultHooks {
 public:
  // The hooks `options` asks for, with their rules parsed against the
  // volume's device count. EINVAL naming a bad rule.
  static Result<std::unique_ptr<FaultHooks>> Create(const FaultOptions& options, size_t devices);
  ~FaultHooks();  // Disarm()s

  // Puts the hooks between the volume and its devices (sets vopt.wrap_io,
  // vopt.shapes) and, with fault_injection, blocks SIGUSR1 in the calling
  // thread and every thread it creates later. REQUIRES: no other thread
  // exists yet; `this` outlives the volume opened with vopt.
  void Install(volume::VolumeOptions& vopt);
  // Logs a warning per active hook (the startup log says a test hook is on).
  void LogActive() const;
  // Starts waiting for SIGUSR1. REQUIRES: the volume is open.
  void Arm();
  // Ends the waiting thread (without a power cut if none came).
  // REQUIRES: before the volume is closed.
  void Disarm();

 private:
  FaultHooks() = default;
  bool power_cut_ = false;
  std::vector<FaultRule> rules_;
  std::vector<device::DeviceShape> shapes_;
  device::FaultInjectingIo* io_ = nullptr;  // owned by the volume
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace kvfs::daemon
