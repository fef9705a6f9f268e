#include "fuse/op_counters.h"

#include <time.h>

#include <string_view>

namespace kvfs::fuse {

namespace op_counters_internal {
std::atomic<uint64_t> g_counts[kSlots];
}  // namespace op_counters_internal

namespace {

// By opcode slot, as g_counts.
Histogram g_handled[op_counters_internal::kSlots];
Histogram g_handoff[op_counters_internal::kSlots];

uint32_t SlotOf(uint32_t opcode) {
  return opcode < op_counters_internal::kSlots - 1 ? opcode : op_counters_internal::kSlots - 1;
}

using op_counters_internal::kSlots;

// By opcode (linux/fuse.h); null: no such opcode.
constexpr const char* kNames[] = {
    nullptr,          "lookup",      "forget",         "getattr",     "setattr",
    "readlink",       "symlink",     nullptr,          "mknod",       "mkdir",
    "unlink",         "rmdir",       "rename",         "link",        "open",
    "read",           "write",       "statfs",         "release",     nullptr,
    "fsync",          "setxattr",    "getxattr",       "listxattr",   "removexattr",
    "flush",          "init",        "opendir",        "readdir",     "releasedir",
    "fsyncdir",       "getlk",       "setlk",          "setlkw",      "access",
    "create",         "interrupt",   "bmap",           "destroy",     "ioctl",
    "poll",           "notify_reply", "batch_forget",  "fallocate",   "readdirplus",
    "rename2",        "lseek",       "copy_file_range", "setupmapping", "removemapping",
    "syncfs",         "tmpfile",     "statx",
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) <= kSlots - 1);
static_assert(FUSE_TMPFILE == 51 && FUSE_RENAME2 == 45 && FUSE_READ == 15);

}  // namespace

const char* RequestName(uint32_t opcode) {
  constexpr uint32_t n = sizeof(kNames) / sizeof(kNames[0]);
  return opcode < n && kNames[opcode] != nullptr ? kNames[opcode] : "other";
}

uint64_t RequestClockNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

void TimeHandled(uint32_t opcode, uint64_t ns) { g_handled[SlotOf(opcode)].Record(ns); }
void TimeHandoff(uint32_t opcode, uint64_t ns) { g_handoff[SlotOf(opcode)].Record(ns); }

std::vector<RequestTimes> RequestTimings() {
  std::vector<RequestTimes> out;
  for (uint32_t op = 0; op < kSlots; ++op) {
    HistogramSnapshot handled = g_handled[op].Snapshot();
    HistogramSnapshot handoff = g_handoff[op].Snapshot();
    if (handled.count() == 0 && handoff.count() == 0) continue;
    out.push_back({RequestName(op), std::move(handled), std::move(handoff)});
  }
  return out;
}

std::vector<std::pair<std::string, uint64_t>> RequestCounts() {
  std::vector<std::pair<std::string, uint64_t>> out;
  uint64_t other = 0;
  for (uint32_t op = 0; op < kSlots; ++op) {
    const uint64_t c = op_counters_internal::g_counts[op].load(std::memory_order_relaxed);
    if (c == 0) continue;
    const char* name = RequestName(op);
    if (std::string_view(name) == "other") {
      other += c;
    } else {
      out.emplace_back(name, c);
    }
  }
  if (other != 0) out.emplace_back("other", other);
  return out;
}

}  // namespace kvfs::fuse
