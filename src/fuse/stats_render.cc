// Rendering of .kvfs/stats and .kvfs/metrics (see stats_render.h).
#include "fuse/stats_render.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvfs::fuse {

using fs::DeviceIoStats;
using fs::LaneStats;
using fs::Op;
using fs::OpName;

namespace {

nlohmann::json LatencyJson(const HistogramSnapshot& h) {
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  return {{"count", h.count()},
          {"mean_us", h.mean_ns() / 1000.0},
          {"p50_us", us(h.Percentile(50))},
          {"p90_us", us(h.Percentile(90))},
          {"p99_us", us(h.Percentile(99))},
          {"p999_us", us(h.Percentile(99.9))},
          {"max_us", us(h.max_ns())}};
}

std::string ErrnoName(int code) {
  const char* n = strerrorname_np(code);
  return n ? n : std::to_string(code);
}

// Prometheus histogram buckets: powers of four from 4 us to ~17 s.
void PromHistogram(std::ostringstream& o, const std::string& name, const std::string& labels,
                   const HistogramSnapshot& h) {
  for (uint64_t le = 4096; le <= (uint64_t{1} << 34); le <<= 2) {
    o << name << "_bucket{" << labels << (labels.empty() ? "" : ",") << "le=\""
      << static_cast<double>(le) / 1e9 << "\"} " << h.CountBelow(le) << "\n";
  }
  o << name << "_bucket{" << labels << (labels.empty() ? "" : ",") << "le=\"+Inf\"} "
    << h.count() << "\n";
  o << name << "_sum{" << labels << "} " << static_cast<double>(h.sum_ns()) / 1e9 << "\n";
  o << name << "_count{" << labels << "} " << h.count() << "\n";
}

}  // namespace

std::string StatsToJson(const fs::StatsSnapshot& s, const FrontEndStats& f) {
  nlohmann::json j;
  for (size_t i = 0; i < s.ops.size(); ++i) {
    j["ops"][OpName(static_cast<Op>(i))] = {{"bytes", s.ops[i].bytes},
                                            {"latency", LatencyJson(s.ops[i].latency)}};
  }
  for (const LaneStats& l : s.lanes) {
    j["lanes"][l.name] = {{"ops", l.ops},           {"bytes", l.bytes},
                          {"errors", l.errors},     {"cancelled", l.cancelled},
                          {"promoted", l.promoted}, {"inflight", l.inflight},
                          {"queued", l.queued},     {"latency", LatencyJson(l.latency)}};
  }
  j["devices"] = nlohmann::json::array();
  for (size_t d = 0; d < s.devices.size(); ++d) {
    const DeviceIoStats& v = s.devices[d];
    j["devices"].push_back({{"device", d},
                            {"path", v.path},
                            {"ops", v.ops},
                            {"bytes", v.bytes},
                            {"errors", v.errors},
                            {"inflight_commands", v.inflight_commands},
                            {"queued", v.queued},
                            {"size_bytes", v.size_bytes},
                            {"used_bytes", v.size_bytes - v.free_bytes},
                            {"free_bytes", v.free_bytes},
                            {"largest_free_bytes", v.largest_free},
                            {"latency", LatencyJson(v.latency)}});
  }
  j["cache"] = {{"hits", s.cache.hits},
                {"misses", s.cache.misses},
                {"bytes", s.cache.bytes},
                {"budget", s.cache.budget},
                {"entries", s.cache.entries},
                {"prefetched_bytes", s.cache.prefetched_bytes},
                {"prefetch_used_bytes", s.cache.prefetch_used_bytes},
                {"prefetch_wasted_bytes", s.cache.prefetch_wasted_bytes}};
  j["staging"] = {{"staged_bytes", s.staged_bytes}, {"bound_bytes", s.staging_bytes}};
  j["commits"] = {{"queued", s.queued_commits}, {"index", s.index_commits}};
  j["lookup_underflows"] = s.lookup_underflows;
  j["atime"] = {{"updates", s.atime_updates}, {"flushes", s.atime_flushes}};
  j["name_cache"] = {{"entries", s.name_cache_entries}, {"bytes", s.name_cache_bytes}};
  j["space"] = {{"total_bytes", s.total_bytes},
                {"free_bytes", s.free_bytes},
                {"largest_free_bytes", s.largest_free},
                {"free_extents", s.free_extents}};
  // Watermarks are 0 with eviction off; the counters stay 0.
  j["eviction"] = {{"on", s.evict_on},
                   {"high_pct", s.evict_high_pct},
                   {"low_pct", s.evict_low_pct},
                   {"min_age_s", static_cast<double>(s.evict_min_age_ns) / 1e9},
                   {"scope", s.evict_scope_xattr ? "xattr" : "mount"},
                   {"files", s.evicted_files},
                   {"bytes", s.evicted_bytes},
                   {"passes", s.evict_passes},
                   {"passes_done", s.evict_passes_done},
                   {"writer_waits", s.evict_writer_waits},
                   {"writer_wait_s", static_cast<double>(s.evict_writer_wait_ns) / 1e9},
                   {"last_age_s", static_cast<double>(s.evict_last_age_ns) / 1e9}};
  j["batch"] = {{"registrations", f.registrations}};
  j["write_yield"] = {{"waits", f.write_yields}, {"waited_ms", f.write_yield_ns / 1000000.0}};
  j["transport"] = f.transport;
  // Reads of opens served by the kernel never reach kvfs: an open stands
  // for them (served_opens, served_bytes: the files' sizes at open).
  j["passthrough"] = {{"mode", f.passthrough},
                      {"on", f.passthrough_on},
                      {"exports", f.passthrough_exports},
                      {"export_failures", f.passthrough_export_failures},
                      {"served_opens", s.file_memory.served_opens},
                      {"served_bytes", s.file_memory.served_bytes}};
  j["file_memory"] = {{"budget", s.file_memory.budget_bytes},
                      {"bytes", s.file_memory.bytes},
                      {"files", s.file_memory.files},
                      {"loads", s.file_memory.loads},
                      {"load_bytes", s.file_memory.load_bytes},
                      {"dropped", s.file_memory.dropped},
                      {"no_room", s.file_memory.no_room},
                      {"unused_prefetch_bytes", s.file_memory.unused_prefetch_bytes},
                      {"kept_bytes", s.file_memory.kept_bytes},
                      {"reused", s.file_memory.reused},
                      {"made_ahead", s.file_memory.made_ahead}};
  j["requests"] = nlohmann::json::object();
  for (const auto& [name, n] : f.requests) j["requests"][name] = n;
  j["request_times"] = nlohmann::json::object();
  for (const RequestTimes& t : f.request_times) {
    j["request_times"][t.name] = {{"handled", LatencyJson(t.handled)},
                                  {"handoff", LatencyJson(t.handoff)}};
  }
  j["errors"] = nlohmann::json::object();
  for (auto [code, n] : s.errors) j["errors"][ErrnoName(code)] = n;
  return j.dump(2) + "\n";
}

std::string StatsToPrometheus(const fs::StatsSnapshot& s, const FrontEndStats& f) {
  std::ostringstream o;
  o << "# HELP kvfs_op_seconds Latency of filesystem operations.\n"
       "# TYPE kvfs_op_seconds histogram\n";
  for (size_t i = 0; i < s.ops.size(); ++i) {
    PromHistogram(o, "kvfs_op_seconds", std::string("op=\"") + OpName(static_cast<Op>(i)) + "\"",
                  s.ops[i].latency);
  }
  o << "# HELP kvfs_op_bytes_total Bytes moved by filesystem operations.\n"
       "# TYPE kvfs_op_bytes_total counter\n";
  for (size_t i = 0; i < s.ops.size(); ++i) {
    o << "kvfs_op_bytes_total{op=\"" << OpName(static_cast<Op>(i)) << "\"} " << s.ops[i].bytes
      << "\n";
  }
  o << "# HELP kvfs_lane_seconds Device command latency per lane.\n"
       "# TYPE kvfs_lane_seconds histogram\n";
  for (const LaneStats& l : s.lanes) {
    PromHistogram(o, "kvfs_lane_seconds", "lane=\"" + l.name + "\"", l.latency);
  }
  o << "# HELP kvfs_device_seconds Device command latency per device.\n"
       "# TYPE kvfs_device_seconds histogram\n";
  for (size_t d = 0; d < s.devices.size(); ++d) {
    PromHistogram(o, "kvfs_device_seconds", "device=\"" + std::to_string(d) + "\"",
                  s.devices[d].latency);
  }
  auto device_metric = [&](const char* name, const char* type, const char* help, auto get) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    for (size_t d = 0; d < s.devices.size(); ++d) {
      o << name << "{device=\"" << d << "\"} " << get(s.devices[d]) << "\n";
    }
  };
  device_metric("kvfs_device_bytes_total", "counter", "Bytes moved per device.",
                [](const DeviceIoStats& v) { return v.bytes; });
  device_metric("kvfs_device_errors_total", "counter", "Failed commands per device.",
                [](const DeviceIoStats& v) { return v.errors; });
  device_metric("kvfs_device_inflight_commands", "gauge", "Commands in flight per device.",
                [](const DeviceIoStats& v) { return v.inflight_commands; });
  device_metric("kvfs_device_size_bytes", "gauge", "Data space per device.",
                [](const DeviceIoStats& v) { return v.size_bytes; });
  device_metric("kvfs_device_used_bytes", "gauge", "Data space in use per device.",
                [](const DeviceIoStats& v) { return v.size_bytes - v.free_bytes; });
  device_metric("kvfs_device_free_bytes", "gauge", "Free data space per device.",
                [](const DeviceIoStats& v) { return v.free_bytes; });
  auto lane_metric = [&](const char* name, const char* type, const char* help, auto get) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    for (const LaneStats& l : s.lanes) o << name << "{lane=\"" << l.name << "\"} " << get(l) << "\n";
  };
  lane_metric("kvfs_lane_ops_total", "counter", "Device commands completed per lane.",
              [](const LaneStats& l) { return l.ops; });
  lane_metric("kvfs_lane_bytes_total", "counter", "Device bytes per lane.",
              [](const LaneStats& l) { return l.bytes; });
  lane_metric("kvfs_lane_errors_total", "counter", "Failed device commands per lane.",
              [](const LaneStats& l) { return l.errors; });
  lane_metric("kvfs_lane_cancelled_total", "counter",
              "Commands dropped before they reached the device (their caller gave up).",
              [](const LaneStats& l) { return l.cancelled; });
  lane_metric("kvfs_lane_promoted_total", "counter",
              "Queued prefetch commands moved to the read lane because a reader waited.",
              [](const LaneStats& l) { return l.promoted; });
  lane_metric("kvfs_lane_inflight", "gauge", "Commands at the device per lane.",
              [](const LaneStats& l) { return l.inflight; });
  lane_metric("kvfs_lane_queued", "gauge", "Commands waiting per lane.",
              [](const LaneStats& l) { return l.queued; });
  auto gauge = [&](const char* name, const char* type, const char* help, auto v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << " " << v << "\n";
  };
  gauge("kvfs_cache_hits_total", "counter", "Reads served from the RAM cache.", s.cache.hits);
  gauge("kvfs_cache_misses_total", "counter", "Reads that went to the device.", s.cache.misses);
  gauge("kvfs_cache_bytes", "gauge", "Bytes held by the RAM cache.", s.cache.bytes);
  gauge("kvfs_prefetch_bytes_total", "counter", "Bytes read by prefetch.",
        s.cache.prefetched_bytes);
  gauge("kvfs_prefetch_used_bytes_total", "counter", "Prefetched bytes later read.",
        s.cache.prefetch_used_bytes);
  gauge("kvfs_prefetch_wasted_bytes_total", "counter", "Prefetched bytes dropped unread.",
        s.cache.prefetch_wasted_bytes);
  gauge("kvfs_staged_bytes", "gauge", "Dirty bytes in staging buffers.", s.staged_bytes);
  gauge("kvfs_commits_queued", "gauge", "Index changes waiting to commit.", s.queued_commits);
  gauge("kvfs_index_commits_total", "counter", "Index batches written.", s.index_commits);
  gauge("kvfs_lookup_underflows_total", "counter",
        "Kernel forgets beyond an inode's lookup count (a kvfs bug).", s.lookup_underflows);
  gauge("kvfs_atime_updates_total", "counter", "Reads and opens that moved an atime.",
        s.atime_updates);
  gauge("kvfs_name_cache_entries", "gauge", "Names whose lookup answer is cached.",
        s.name_cache_entries);
  gauge("kvfs_name_cache_bytes", "gauge", "Memory charged to the name cache.",
        s.name_cache_bytes);
  gauge("kvfs_space_total_bytes", "gauge", "Data space of the volume.", s.total_bytes);
  gauge("kvfs_space_free_bytes", "gauge", "Free data space.", s.free_bytes);
  gauge("kvfs_space_largest_free_bytes", "gauge", "Largest free extent.", s.largest_free);
  gauge("kvfs_evict_enabled", "gauge", "1 when LRU eviction is on (-o evict=lru), else 0.",
        s.evict_on ? 1 : 0);
  gauge("kvfs_evict_high_watermark_percent", "gauge",
        "Data space used (%) at which an eviction pass starts; 0 with eviction off.",
        s.evict_high_pct);
  gauge("kvfs_evict_low_watermark_percent", "gauge",
        "Data space used (%) at which an eviction pass stops; 0 with eviction off.",
        s.evict_low_pct);
  gauge("kvfs_evicted_files_total", "counter", "Files unlinked by eviction.", s.evicted_files);
  gauge("kvfs_evicted_bytes_total", "counter", "Bytes of the files unlinked by eviction.",
        s.evicted_bytes);
  gauge("kvfs_evict_passes_total", "counter", "Eviction passes run.", s.evict_passes);
  gauge("kvfs_evict_writer_waits_total", "counter",
        "Writes that found the volume full and waited for eviction.", s.evict_writer_waits);
  gauge("kvfs_evict_writer_wait_seconds_total", "counter",
        "Time writes waited for eviction to free space.", s.evict_writer_wait_ns / 1e9);
  gauge("kvfs_evict_last_age_seconds", "gauge",
        "Time since the last use of the most recently evicted file, when it was evicted.",
        s.evict_last_age_ns / 1e9);
  gauge("kvfs_batch_registrations", "gauge", "Live batch-ioctl buffer registrations.",
        f.registrations);
  gauge("kvfs_write_yields_total", "counter", "Writes that waited for another caller's reads.",
        f.write_yields);
  gauge("kvfs_write_yield_seconds_total", "counter",
        "Time writes waited for other callers' reads.", f.write_yield_ns / 1e9);
  gauge("kvfs_transport_uring", "gauge",
        "1 when requests come over FUSE-over-io_uring queues, 0 over /dev/fuse.",
        f.uring ? 1 : 0);
  gauge("kvfs_passthrough", "gauge",
        "1 when opens of cached files are served by the kernel (FUSE passthrough).",
        f.passthrough_on ? 1 : 0);
  gauge("kvfs_passthrough_opens_total", "counter",
        "Opens served by the kernel from file memory (their reads are not seen).",
        s.file_memory.served_opens);
  gauge("kvfs_passthrough_bytes_total", "counter",
        "Sizes of the files at opens served by the kernel.", s.file_memory.served_bytes);
  gauge("kvfs_file_memory_bytes", "gauge", "Bytes held as per-file memory.",
        s.file_memory.bytes);
  gauge("kvfs_file_memory_files", "gauge", "Files held as per-file memory.",
        s.file_memory.files);
  o << "# HELP kvfs_fuse_requests_total FUSE requests received, by opcode.\n"
       "# TYPE kvfs_fuse_requests_total counter\n";
  for (const auto& [name, n] : f.requests) {
    o << "kvfs_fuse_requests_total{op=\"" << name << "\"} " << n << "\n";
  }
  o << "# HELP kvfs_fuse_request_seconds Time of FUSE requests inside the daemon, by opcode: "
       "handled (taken from the kernel to the handler's return), handoff (to the start on a "
       "worker).\n# TYPE kvfs_fuse_request_seconds histogram\n";
  for (const RequestTimes& t : f.request_times) {
    PromHistogram(o, "kvfs_fuse_request_seconds", "op=\"" + t.name + "\",stage=\"handled\"",
                  t.handled);
    if (t.handoff.count() != 0) {
      PromHistogram(o, "kvfs_fuse_request_seconds", "op=\"" + t.name + "\",stage=\"handoff\"",
                    t.handoff);
    }
  }
  o << "# HELP kvfs_errors_total Failed calls by errno.\n# TYPE kvfs_errors_total counter\n";
  for (auto [code, n] : s.errors) o << "kvfs_errors_total{errno=\"" << ErrnoName(code) << "\"} " << n << "\n";
  return o.str();
}

}  // namespace kvfs::fuse
