// The two renderings of a mount's statistics: JSON for MOUNT/.kvfs/stats
// (read by kvfsctl stats; tools/ctl/stats_view.h) and the Prometheus text
// exposition format for MOUNT/.kvfs/metrics. Both are made from fs/'s
// snapshot (fs/stats.h) and from FrontEndStats, what only the front end
// knows.
//
//   fs::StatsSnapshot s = fs.Stats();
//   FrontEndStats f = ...;  // control.cc fills it from the SessionState
//   std::string json = StatsToJson(s, f);
//
// Compatibility: the JSON keys and Prometheus names are what operators'
// dashboards and kvfsctl read (docs/operations.md); add, never rename.
// A new counter goes in both renderings.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fs/stats.h"
#include "fuse/op_counters.h"

namespace kvfs::fuse {

struct FrontEndStats {
  // How requests reach the daemon: "/dev/fuse", or
  // UringTransport::Describe() ("io_uring (2 queues x 16 entries)").
  std::string transport = "/dev/fuse";
  bool uring = false;  // requests come over FUSE-over-io_uring queues
  // Passthrough::Describe() ("on (...)" or "off (why)"), whether it is on,
  // and the file memories registered with the kernel (and refused).
  std::string passthrough = "off";
  bool passthrough_on = false;
  uint64_t passthrough_exports = 0;
  uint64_t passthrough_export_failures = 0;
  // Live batch-ioctl buffer registrations (fuse/buffer_registry.h).
  uint64_t registrations = 0;
  // Writes that waited for another caller's reads, and how long in all
  // (ReadPriority).
  uint64_t write_yields = 0;
  uint64_t write_yield_ns = 0;
  // FUSE requests received, by opcode name, counted once each
  // (fuse/op_counters.h).
  std::vector<std::pair<std::string, uint64_t>> requests;
  // Their times inside the daemon, by opcode (fuse/op_counters.h).
  std::vector<RequestTimes> request_times;
};

// A JSON object (two-space indents, keys sorted, ending in a newline).
std::string StatsToJson(const fs::StatsSnapshot& s, const FrontEndStats& f);
// Prometheus text: HELP and TYPE lines before each metric's samples.
std::string StatsToPrometheus(const fs::StatsSnapshot& s, const FrontEndStats& f);

}  // namespace kvfs::fuse
