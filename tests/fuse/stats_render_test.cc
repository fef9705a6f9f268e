// fuse/stats_render.h: what .kvfs/stats (JSON) and .kvfs/metrics
// (Prometheus) show for a snapshot, and that both carry the same counters.
#include "fuse/stats_render.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <string>

#include "common/histogram.h"

namespace kvfs::fuse {
namespace {

HistogramSnapshot Latencies(uint64_t ns, int n) {
  Histogram h;
  for (int i = 0; i < n; ++i) h.Record(ns);
  return h.Snapshot();
}

fs::StatsSnapshot Sample() {
  fs::StatsSnapshot s;
  s.ops[static_cast<size_t>(fs::Op::kLookup)].latency = Latencies(20'000, 3);
  s.ops[static_cast<size_t>(fs::Op::kRead)].bytes = 1 << 20;
  s.errors[ENOSPC] = 2;
  fs::LaneStats read;
  read.name = "read";
  read.ops = 7;
  read.bytes = 7 << 20;
  read.inflight = 1;
  read.queued = 4;
  read.latency = Latencies(100'000, 7);
  s.lanes.push_back(read);
  fs::DeviceIoStats dev;
  dev.path = "/tmp/img";
  dev.ops = 9;
  dev.bytes = 9 << 20;
  dev.inflight_commands = 2;
  dev.size_bytes = 60;
  dev.free_bytes = 25;
  dev.largest_free = 20;
  s.devices = {dev, dev};
  s.devices[1].path = "/tmp/img2";
  s.devices[1].size_bytes = 40;
  s.devices[1].free_bytes = 15;
  s.cache.hits = 5;
  s.total_bytes = 100;
  s.free_bytes = 40;
  return s;
}

FrontEndStats Front() {
  FrontEndStats f;
  f.registrations = 3;
  f.write_yields = 2;
  f.write_yield_ns = 1'500'000;
  f.requests = {{"LOOKUP", 11}, {"READ", 12}};
  f.request_times = {{"lookup", Latencies(5'000, 11), HistogramSnapshot()},
                     {"setattr", Latencies(40'000, 2), Latencies(9'000, 2)}};
  return f;
}

TEST(StatsRenderTest, JsonCarriesTheSnapshotAndTheFrontEndFields) {
  auto j = nlohmann::json::parse(StatsToJson(Sample(), Front()));
  EXPECT_EQ(j["ops"]["lookup"]["latency"]["count"].get<uint64_t>(), 3u);
  EXPECT_EQ(j["ops"]["read"]["bytes"].get<uint64_t>(), 1u << 20);
  EXPECT_EQ(j["errors"]["ENOSPC"].get<uint64_t>(), 2u);
  EXPECT_EQ(j["lanes"]["read"]["queued"].get<uint64_t>(), 4u);
  ASSERT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["devices"][1]["device"].get<int>(), 1);
  EXPECT_EQ(j["devices"][1]["path"].get<std::string>(), "/tmp/img2");
  EXPECT_EQ(j["cache"]["hits"].get<uint64_t>(), 5u);
  EXPECT_EQ(j["space"]["free_bytes"].get<uint64_t>(), 40u);
  EXPECT_EQ(j["batch"]["registrations"].get<uint64_t>(), 3u);
  EXPECT_DOUBLE_EQ(j["write_yield"]["waited_ms"].get<double>(), 1.5);
  EXPECT_EQ(j["requests"]["READ"].get<uint64_t>(), 12u);
  EXPECT_EQ(j["transport"].get<std::string>(), "/dev/fuse");
}

TEST(StatsRenderTest, EachDeviceCarriesItsSizeUsedAndFreeSpace) {
  const fs::StatsSnapshot s = Sample();
  auto j = nlohmann::json::parse(StatsToJson(s, Front()));
  const auto& d1 = j["devices"][1];
  EXPECT_EQ(d1["size_bytes"].get<uint64_t>(), 40u);
  EXPECT_EQ(d1["used_bytes"].get<uint64_t>(), 25u);
  EXPECT_EQ(d1["free_bytes"].get<uint64_t>(), 15u);
  EXPECT_EQ(j["devices"][0]["largest_free_bytes"].get<uint64_t>(), 20u);
  const std::string prom = StatsToPrometheus(s, Front());
  for (const char* line :
       {"kvfs_device_size_bytes{device=\"0\"} 60\n", "kvfs_device_used_bytes{device=\"0\"} 35\n",
        "kvfs_device_free_bytes{device=\"0\"} 25\n", "kvfs_device_size_bytes{device=\"1\"} 40\n",
        "kvfs_device_used_bytes{device=\"1\"} 25\n", "kvfs_device_free_bytes{device=\"1\"} 15\n"}) {
    EXPECT_NE(prom.find(line), std::string::npos) << line;
  }
  EXPECT_NE(prom.find("# TYPE kvfs_device_free_bytes gauge\n"), std::string::npos);
}

TEST(StatsRenderTest, TransportIsAJsonStringAndAPrometheusGauge) {
  FrontEndStats f = Front();
  EXPECT_NE(StatsToPrometheus(Sample(), f).find("\nkvfs_transport_uring 0\n"), std::string::npos);
  f.transport = "io_uring (2 queues x 16 entries)";
  f.uring = true;
  auto j = nlohmann::json::parse(StatsToJson(Sample(), f));
  EXPECT_EQ(j["transport"].get<std::string>(), "io_uring (2 queues x 16 entries)");
  EXPECT_NE(StatsToPrometheus(Sample(), f)
                .find("# TYPE kvfs_transport_uring gauge\nkvfs_transport_uring 1\n"),
            std::string::npos);
}

fs::StatsSnapshot Evicting() {
  fs::StatsSnapshot s = Sample();
  s.evict_on = true;
  s.evict_high_pct = 90;
  s.evict_low_pct = 80;
  s.evict_min_age_ns = 60'000'000'000;
  s.evict_scope_xattr = true;
  s.evicted_files = 12;
  s.evicted_bytes = 12 << 20;
  s.evict_passes = 3;
  s.evict_writer_waits = 2;
  s.evict_writer_wait_ns = 250'000'000;
  s.evict_last_age_ns = 90'500'000'000;
  return s;
}

TEST(StatsRenderTest, JsonEvictionObjectHasWatermarksAndCounters) {
  auto j = nlohmann::json::parse(StatsToJson(Evicting(), Front()))["eviction"];
  EXPECT_TRUE(j["on"].get<bool>());
  EXPECT_EQ(j["high_pct"].get<unsigned>(), 90u);
  EXPECT_EQ(j["low_pct"].get<unsigned>(), 80u);
  EXPECT_DOUBLE_EQ(j["min_age_s"].get<double>(), 60.0);
  EXPECT_EQ(j["scope"].get<std::string>(), "xattr");
  EXPECT_EQ(j["files"].get<uint64_t>(), 12u);
  EXPECT_EQ(j["bytes"].get<uint64_t>(), 12u << 20);
  EXPECT_EQ(j["passes"].get<uint64_t>(), 3u);
  EXPECT_EQ(j["writer_waits"].get<uint64_t>(), 2u);
  EXPECT_DOUBLE_EQ(j["writer_wait_s"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["last_age_s"].get<double>(), 90.5);

  // Off: the object is still there (dashboards and kvfsctl read "on").
  auto off = nlohmann::json::parse(StatsToJson(Sample(), Front()))["eviction"];
  EXPECT_FALSE(off["on"].get<bool>());
  EXPECT_EQ(off["scope"].get<std::string>(), "mount");
  EXPECT_EQ(off["files"].get<uint64_t>(), 0u);
}

TEST(StatsRenderTest, PrometheusEvictionCountersAndWatermarkGauges) {
  const std::string prom = StatsToPrometheus(Evicting(), Front());
  for (const char* line : {
           "# TYPE kvfs_evict_enabled gauge\nkvfs_evict_enabled 1\n",
           "# TYPE kvfs_evict_high_watermark_percent gauge\n"
           "kvfs_evict_high_watermark_percent 90\n",
           "# TYPE kvfs_evict_low_watermark_percent gauge\n"
           "kvfs_evict_low_watermark_percent 80\n",
           "# TYPE kvfs_evicted_files_total counter\nkvfs_evicted_files_total 12\n",
           "# TYPE kvfs_evicted_bytes_total counter\nkvfs_evicted_bytes_total 12582912\n",
           "# TYPE kvfs_evict_passes_total counter\nkvfs_evict_passes_total 3\n",
           "# TYPE kvfs_evict_writer_waits_total counter\nkvfs_evict_writer_waits_total 2\n",
           "# TYPE kvfs_evict_writer_wait_seconds_total counter\n"
           "kvfs_evict_writer_wait_seconds_total 0.25\n",
           "# TYPE kvfs_evict_last_age_seconds gauge\nkvfs_evict_last_age_seconds 90.5\n",
       }) {
    EXPECT_NE(prom.find(line), std::string::npos) << line;
  }
  EXPECT_NE(StatsToPrometheus(Sample(), Front()).find("\nkvfs_evict_enabled 0\n"),
            std::string::npos);
}

TEST(StatsRenderTest, EmptySnapshotRendersEmptyCollections) {
  auto j = nlohmann::json::parse(StatsToJson(fs::StatsSnapshot{}, FrontEndStats{}));
  EXPECT_TRUE(j["devices"].is_array() && j["devices"].empty());
  EXPECT_TRUE(j["errors"].is_object() && j["errors"].empty());
  EXPECT_TRUE(j["requests"].is_object() && j["requests"].empty());
}

TEST(StatsRenderTest, PrometheusCarriesEveryLaneAndDeviceCounterOfTheJson) {
  const fs::StatsSnapshot s = Sample();
  const std::string prom = StatsToPrometheus(s, Front());
  auto j = nlohmann::json::parse(StatsToJson(s, Front()));
  for (const auto& [key, value] : j["lanes"]["read"].items()) {
    if (key == "latency") continue;
    const bool gauge = key == "inflight" || key == "queued";
    const std::string name = "kvfs_lane_" + key + (gauge ? "" : "_total") + "{lane=\"read\"} ";
    EXPECT_NE(prom.find(name), std::string::npos) << name;
  }
  EXPECT_NE(prom.find("kvfs_lane_queued{lane=\"read\"} 4\n"), std::string::npos);
  EXPECT_NE(prom.find("kvfs_device_bytes_total{device=\"1\"} 9437184\n"), std::string::npos);
  EXPECT_NE(prom.find("kvfs_device_seconds_count{device=\"0\"} 0\n"), std::string::npos);
  EXPECT_NE(prom.find("kvfs_op_seconds_count{op=\"lookup\"} 3\n"), std::string::npos);
  EXPECT_NE(prom.find("# TYPE kvfs_space_free_bytes gauge\nkvfs_space_free_bytes 40\n"),
            std::string::npos);
  EXPECT_NE(prom.find("kvfs_batch_registrations 3\n"), std::string::npos);
  EXPECT_NE(prom.find("kvfs_fuse_requests_total{op=\"READ\"} 12\n"), std::string::npos);
  EXPECT_NE(prom.find("kvfs_errors_total{errno=\"ENOSPC\"} 2\n"), std::string::npos);
}

TEST(StatsRenderTest, RequestTimesByOpcodeInBothRenderings) {
  const std::string prom = StatsToPrometheus(Sample(), Front());
  auto j = nlohmann::json::parse(StatsToJson(Sample(), Front()));
  EXPECT_EQ(j["request_times"]["lookup"]["handled"]["count"].get<uint64_t>(), 11u);
  EXPECT_EQ(j["request_times"]["lookup"]["handoff"]["count"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["request_times"]["setattr"]["handoff"]["count"].get<uint64_t>(), 2u);
  EXPECT_NE(prom.find("kvfs_fuse_request_seconds_count{op=\"lookup\",stage=\"handled\"} 11\n"),
            std::string::npos);
  EXPECT_NE(prom.find("kvfs_fuse_request_seconds_count{op=\"setattr\",stage=\"handoff\"} 2\n"),
            std::string::npos);
  // A stage no request went through is left out.
  EXPECT_EQ(prom.find("op=\"lookup\",stage=\"handoff\""), std::string::npos);
}

}  // namespace
}  // namespace kvfs::fuse
