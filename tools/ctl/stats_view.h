// The human renderings of kvfsctl: `kvfsctl stats` tables from the JSON of
// MOUNT/.kvfs/stats (src/fuse/stats_render.cc writes it), and df -h style sizes.
//
//   nlohmann::json now = nlohmann::json::parse(text);
//   std::fputs(RenderStats(now, nullptr, 0, header).c_str(), stdout);
//
// Keys missing from the document (a daemon of another version) show as
// "-" or 0; nothing here throws on a document of the wrong shape.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kvfs::ctl {

// df -h: powers of 1024 with the suffixes K M G T P E, rounded up, one
// decimal below 10 ("1.5G", "20G", "1023M"); plain bytes below 1 KiB.
std::string HumanBytes(uint64_t bytes);
// A latency given in microseconds: "850ns", "12.3us", "4.10ms", "1.20s".
std::string HumanMicros(double us);

// The stats table: ops (count, bytes, p50/p90/p99/p99.9/max latency),
// lanes (ops, bytes, in-flight, queued, errors, p50/p99), devices (the
// same per device of the volume, with its path), then cache,
// prefetch, staging, space, eviction (when on), transport, FUSE requests by
// opcode and errors lines. With `prev` (the document read
// `interval_s` seconds before) it adds per-second rates of the counters
// between the two. `header` is the first line.
std::string RenderStats(const nlohmann::json& now, const nlohmann::json* prev, double interval_s,
                        std::string_view header);

}  // namespace kvfs::ctl
