#include "ctl/stats_view.h"

#include <gtest/gtest.h>

#include <string>

namespace kvfs::ctl {
namespace {

using nlohmann::json;

TEST(HumanBytes, RoundsUpInPowersOf1024LikeDfH) {
  EXPECT_EQ(HumanBytes(0), "0");
  EXPECT_EQ(HumanBytes(1023), "1023");
  EXPECT_EQ(HumanBytes(1024), "1.0K");
  EXPECT_EQ(HumanBytes(1025), "1.1K");  // up, never down
  EXPECT_EQ(HumanBytes(9 * 1024 * 1024 + 1), "9.1M");
  EXPECT_EQ(HumanBytes(10 * 1024 * 1024 - 1), "10M");  // 9.99 rounds up to 10
  EXPECT_EQ(HumanBytes(1023ull << 20), "1023M");
  EXPECT_EQ(HumanBytes((1ull << 30) - 1), "1.0G");  // 1023.99M rounds into the next unit
  EXPECT_EQ(HumanBytes(64ull << 30), "64G");
  EXPECT_EQ(HumanBytes(3ull << 40), "3.0T");
}

TEST(HumanMicros, PicksAUnitWithThreeSignificantDigits) {
  EXPECT_EQ(HumanMicros(0.538), "538ns");
  EXPECT_EQ(HumanMicros(3.52), "3.52us");
  EXPECT_EQ(HumanMicros(42.0), "42.0us");
  EXPECT_EQ(HumanMicros(2530), "2.53ms");
  EXPECT_EQ(HumanMicros(10600), "10.6ms");
  EXPECT_EQ(HumanMicros(1.2e6), "1.20s");
}

json Doc(uint64_t reads, uint64_t read_bytes, uint64_t hits) {
  return json{
      {"ops",
       {{"read",
         {{"bytes", read_bytes},
          {"latency",
           {{"count", reads}, {"p50_us", 16.9}, {"p90_us", 89.1}, {"p99_us", 2530.0},
            {"p999_us", 2530.0}, {"max_us", 2530.0}}}}}}},
      {"lanes", {{"read", {{"ops", 7}, {"bytes", 4096}, {"inflight", 2}, {"queued", 3},
                           {"errors", 1}, {"latency", {{"count", 0}}}}}}},
      {"cache", {{"hits", hits}, {"misses", 1}, {"bytes", 2048}, {"budget", 1 << 30}}},
      {"errors", {{"EIO", 2}}}};
}

// The row of the table that starts with `name` (the first one).
std::string Row(const std::string& table, const std::string& name) {
  size_t at = table.find("\n" + name + " ");
  if (at == std::string::npos) return "";
  return table.substr(at + 1, table.find('\n', at + 1) - at - 1);
}

TEST(RenderStats, ShowsCountsPercentilesLanesAndErrors) {
  std::string t = RenderStats(Doc(24, 3 << 20, 3), nullptr, 0, "HEADER");
  EXPECT_EQ(t.substr(0, 7), "HEADER\n");
  EXPECT_EQ(Row(t, "read"),
            "read              24     3.0M   16.9us   89.1us   2.53ms   2.53ms   2.53ms");
  EXPECT_NE(t.find("read               7     4.0K         2       3       1        -        -"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("hits 3, misses 1, hit rate 75.0%"), std::string::npos) << t;
  EXPECT_NE(t.find("errors    EIO 2\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("OPS/S"), std::string::npos);
}

TEST(RenderStats, RatesAreTheGrowthBetweenTwoDocumentsPerSecond) {
  const json prev = Doc(100, 1 << 20, 10);
  const json now = Doc(300, 5 << 20, 50);
  std::string t = RenderStats(now, &prev, 2.0, "H");
  // 200 reads and 4 MiB in 2 s; 40 hits in 2 s.
  EXPECT_EQ(Row(t, "read"), "read             300      100     5.0M     2.0M   16.9us   89.1us   "
                            "2.53ms   2.53ms   2.53ms");
  EXPECT_NE(t.find("(now 20 hits/s, 0 misses/s)"), std::string::npos) << t;
}

TEST(RenderStats, ACounterThatWentBackShowsNoRate) {
  const json prev = Doc(300, 5 << 20, 50);
  const json now = Doc(10, 1 << 20, 1);  // the daemon restarted
  std::string t = RenderStats(now, &prev, 1.0, "H");
  const std::string want = "read              10        -     1.0M        -   ";
  EXPECT_EQ(Row(t, "read").substr(0, want.size()), want);
}

TEST(RenderStats, ListsFuseRequestsByOpcodeWithTheirTotal) {
  json prev = Doc(1, 1, 1), now = Doc(1, 1, 1);
  prev["requests"] = {{"lookup", 2}, {"read", 10}};
  now["requests"] = {{"read", 30}, {"lookup", 4}, {"batch_forget", 1}, {"write", 0}};
  // Known opcodes first in their usual order, then others; zero counts left out.
  EXPECT_EQ(Row(RenderStats(now, nullptr, 0, "H"), "requests"),
            "requests  35: lookup 4, read 30, batch_forget 1");
  EXPECT_EQ(Row(RenderStats(now, &prev, 2.0, "H"), "requests"),
            "requests  35: lookup 4 (1.0/s), read 30 (10/s), batch_forget 1 (-/s)");
  EXPECT_EQ(Row(RenderStats(Doc(1, 1, 1), nullptr, 0, "H"), "requests"), "requests  0");
}

TEST(RenderStats, ShowsADeviceTableWithRatesPerDevice) {
  auto device = [](int i, uint64_t ops, uint64_t bytes) {
    return json{{"device", i},
                {"path", "/var/tmp/d" + std::to_string(i) + ".img"},
                {"ops", ops},
                {"bytes", bytes},
                {"errors", i},
                {"inflight_commands", 2},
                {"queued", 5},
                {"latency", {{"count", ops}, {"p50_us", 80.5}, {"p99_us", 2530.0}}}};
  };
  json prev = Doc(1, 1, 1), now = Doc(1, 1, 1);
  prev["devices"] = {device(0, 10, 1 << 20), device(1, 0, 0)};
  now["devices"] = {device(0, 30, 5 << 20), device(1, 4, 4096)};
  std::string t = RenderStats(now, nullptr, 0, "H");
  EXPECT_NE(t.find("\nDEVICE        OPS    BYTES IN-FLIGHT  QUEUED  ERRORS      P50      P99  PATH\n"),
            std::string::npos)
      << t;
  EXPECT_EQ(Row(t, "0"),
            "0              30     5.0M         2       5       0   80.5us   2.53ms  /var/tmp/d0.img");
  EXPECT_EQ(Row(t, "1"),
            "1               4     4.0K         2       5       1   80.5us   2.53ms  /var/tmp/d1.img");
  // 20 commands and 4 MiB in 2 s on device 0.
  t = RenderStats(now, &prev, 2.0, "H");
  EXPECT_EQ(Row(t, "0"), "0              30       10     5.0M     2.0M         2       5       0   "
                         "80.5us   2.53ms  /var/tmp/d0.img");
  // No device array (a daemon of another version): no table.
  EXPECT_EQ(RenderStats(Doc(1, 1, 1), nullptr, 0, "H").find("DEVICE"), std::string::npos);
  json odd = Doc(1, 1, 1);
  odd["devices"] = {3, json::object()};
  t = RenderStats(odd, &odd, 1.0, "H");
  EXPECT_EQ(Row(t, "1"), "1               0        -        0        -         0       0       0"
                         "        -        -  -");
}

TEST(RenderStats, NamesTheTransport) {
  json now = Doc(1, 1, 1);
  EXPECT_EQ(Row(RenderStats(now, nullptr, 0, "H"), "transport"), "transport -");
  now["transport"] = "io_uring (2 queues x 16 entries)";
  EXPECT_EQ(Row(RenderStats(now, nullptr, 0, "H"), "transport"),
            "transport io_uring (2 queues x 16 entries)");
  now["transport"] = 3;  // another shape
  EXPECT_EQ(Row(RenderStats(now, nullptr, 0, "H"), "transport"), "transport -");
}

TEST(RenderStats, ToleratesADocumentOfAnotherShape) {
  for (const json& j : {json::object(), json{{"ops", 3}}, json{{"lanes", {{"x", "y"}}}},
                        json{{"cache", json::array()}}}) {
    std::string t = RenderStats(j, &j, 1.0, "H");
    EXPECT_NE(t.find("errors    none"), std::string::npos) << j.dump();
  }
}

TEST(RenderStats, EvictionLineOnlyWhenEvictionIsOn) {
  json doc = {{"eviction",
               {{"on", true}, {"high_pct", 90}, {"low_pct", 80}, {"min_age_s", 60.0},
                {"scope", "mount"}, {"files", 12}, {"bytes", 12 << 20}, {"passes", 3},
                {"writer_waits", 2}, {"writer_wait_s", 0.25}, {"last_age_s", 90.5}}}};
  const std::string out = RenderStats(doc, nullptr, 0, "h");
  EXPECT_NE(out.find("eviction  lru 90% -> 80% of data space, min age 60s, scope mount; 12 files "
                     "(12M) in 3 passes, last aged 90.5s; 2 writer waits (0.25s)\n"),
            std::string::npos)
      << out;
  doc["eviction"]["on"] = false;
  EXPECT_EQ(RenderStats(doc, nullptr, 0, "h").find("eviction "), std::string::npos);
  // A document without the object (an older daemon) or with a wrong "on".
  EXPECT_EQ(RenderStats(json::object(), nullptr, 0, "h").find("eviction "), std::string::npos);
  doc["eviction"] = {{"on", "yes"}};
  EXPECT_EQ(RenderStats(doc, nullptr, 0, "h").find("eviction "), std::string::npos);
}

}  // namespace
}  // namespace kvfs::ctl
