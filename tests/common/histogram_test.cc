#include "common/histogram.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

namespace kvfs {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kMs = 1000 * kUs;

// |got - want| <= frac * want.
void ExpectNear(uint64_t got, double want, double frac) {
  EXPECT_NEAR(static_cast<double>(got), want, want * frac) << "got " << got << " want " << want;
}

TEST(HistogramTest, EmptyHasNoCountsAndZeroPercentiles) {
  Histogram h;
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.count(), 0u);
  EXPECT_EQ(s.sum_ns(), 0u);
  EXPECT_EQ(s.min_ns(), 0u);
  EXPECT_EQ(s.max_ns(), 0u);
  EXPECT_EQ(s.Percentile(50), 0u);
  EXPECT_EQ(s.CountBelow(UINT64_MAX), 0u);
}

TEST(HistogramTest, BucketsTileTheRangeAndAreAtMostASixteenthWide) {
  EXPECT_EQ(HistogramSnapshot::BucketLowerNs(0), 0u);
  EXPECT_EQ(HistogramSnapshot::BucketUpperNs(0), 1024u);
  for (size_t i = 0; i < HistogramSnapshot::kBucketCount; ++i) {
    const uint64_t lo = HistogramSnapshot::BucketLowerNs(i);
    const uint64_t hi = HistogramSnapshot::BucketUpperNs(i);
    ASSERT_LT(lo, hi) << i;
    EXPECT_EQ(HistogramSnapshot::BucketFor(lo), i);
    if (i + 1 < HistogramSnapshot::kBucketCount) {
      EXPECT_EQ(HistogramSnapshot::BucketFor(hi - 1), i);
      EXPECT_EQ(HistogramSnapshot::BucketLowerNs(i + 1), hi);
      if (i > 0) {
        EXPECT_LE((hi - lo) * 16, lo) << i;
      }
    }
  }
  // 1 us .. 100 s are resolved; only beyond ~137 s is one overflow bucket.
  EXPECT_EQ(HistogramSnapshot::BucketFor(1023), 0u);
  EXPECT_EQ(HistogramSnapshot::BucketFor(1024), 1u);
  EXPECT_LT(HistogramSnapshot::BucketFor(100'000 * kMs), HistogramSnapshot::kBucketCount - 1);
  EXPECT_EQ(HistogramSnapshot::BucketFor(uint64_t{1} << 37), HistogramSnapshot::kBucketCount - 1);
  EXPECT_EQ(HistogramSnapshot::BucketFor(UINT64_MAX), HistogramSnapshot::kBucketCount - 1);
}

TEST(HistogramTest, PercentilesOfUniformValuesAreWithinOnePercent) {
  Histogram h;
  for (uint64_t i = 1; i <= 10000; ++i) h.Record(i * kUs);  // 1 us .. 10 ms
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.count(), 10000u);
  EXPECT_EQ(s.sum_ns(), 10000u * 10001 / 2 * kUs);
  EXPECT_EQ(s.min_ns(), 1 * kUs);
  EXPECT_EQ(s.max_ns(), 10 * kMs);
  ExpectNear(s.Percentile(50), 5000 * kUs, 0.01);
  ExpectNear(s.Percentile(90), 9000 * kUs, 0.01);
  ExpectNear(s.Percentile(99), 9900 * kUs, 0.01);
  ExpectNear(s.Percentile(99.9), 9990 * kUs, 0.01);
  EXPECT_EQ(s.Percentile(100), 10 * kMs);
  EXPECT_EQ(s.Percentile(0), 1 * kUs);
  ExpectNear(static_cast<uint64_t>(s.mean_ns()), 5000.5 * kUs, 0.0001);
}

TEST(HistogramTest, PercentilesOfATwoModeMixFindEachMode) {
  Histogram h;
  for (int i = 0; i < 990; ++i) h.Record(100 * kUs);
  for (int i = 0; i < 10; ++i) h.Record(50 * kMs);
  HistogramSnapshot s = h.Snapshot();
  ExpectNear(s.Percentile(50), 100 * kUs, 1.0 / 16);
  ExpectNear(s.Percentile(99), 100 * kUs, 1.0 / 16);
  ExpectNear(s.Percentile(99.9), 50 * kMs, 1.0 / 16);
  EXPECT_EQ(s.Percentile(100), 50 * kMs);
}

TEST(HistogramTest, ASingleRepeatedValueIsReportedExactly) {
  Histogram h;
  for (int i = 0; i < 1000; ++i) h.Record(1'234'567);
  HistogramSnapshot s = h.Snapshot();
  for (double p : {0.0, 50.0, 90.0, 99.0, 99.9, 100.0}) EXPECT_EQ(s.Percentile(p), 1'234'567u) << p;
}

TEST(HistogramTest, ExtremesLandInTheEdgeBuckets) {
  Histogram h;
  h.Record(0);
  h.Record(500);
  h.Record(200'000 * kMs);  // 200 s
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.buckets()[0], 2u);
  EXPECT_EQ(s.buckets()[HistogramSnapshot::kBucketCount - 1], 1u);
  EXPECT_EQ(s.Percentile(100), 200'000 * kMs);
  EXPECT_LE(s.Percentile(50), 1024u);
}

TEST(HistogramTest, CountBelowIsExactAtPowersOfTwo) {
  Histogram h;
  for (uint64_t i = 1; i <= 4096; ++i) h.Record(i * kUs);
  HistogramSnapshot s = h.Snapshot();
  // Values i * 1000 ns below 2^20 ns = 1048576: i = 1..1048.
  EXPECT_EQ(s.CountBelow(uint64_t{1} << 20), 1048u);
  EXPECT_EQ(s.CountBelow(uint64_t{1} << 10), 1u);  // 1000 < 1024
  EXPECT_EQ(s.CountBelow(uint64_t{1} << 11), 2u);  // 1000, 2000 < 2048
  EXPECT_EQ(s.CountBelow(UINT64_MAX), 4096u);
}

TEST(HistogramTest, MergeAddsCounts) {
  Histogram a, b;
  for (int i = 0; i < 100; ++i) a.Record(10 * kUs);
  for (int i = 0; i < 300; ++i) b.Record(1 * kMs);
  HistogramSnapshot s = a.Snapshot();
  s.Merge(b.Snapshot());
  EXPECT_EQ(s.count(), 400u);
  EXPECT_EQ(s.sum_ns(), 100 * 10 * kUs + 300 * kMs);
  EXPECT_EQ(s.min_ns(), 10 * kUs);
  EXPECT_EQ(s.max_ns(), 1 * kMs);
  ExpectNear(s.Percentile(20), 10 * kUs, 1.0 / 16);
  ExpectNear(s.Percentile(50), 1 * kMs, 1.0 / 16);
}

TEST(HistogramTest, ConcurrentRecordsAreAllCounted) {
  Histogram h;
  constexpr int kThreads = 4, kEach = 100'000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&h, t] {
      for (int i = 0; i < kEach; ++i) h.Record(static_cast<uint64_t>(t + 1) * kUs + i);
    });
  }
  for (auto& t : ts) t.join();
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.count(), uint64_t{kThreads} * kEach);
  uint64_t want = 0;
  for (int t = 0; t < kThreads; ++t) {
    want += uint64_t(t + 1) * kUs * kEach + uint64_t(kEach) * (kEach - 1) / 2;
  }
  EXPECT_EQ(s.sum_ns(), want);
  EXPECT_EQ(s.min_ns(), 1 * kUs);
  EXPECT_EQ(s.max_ns(), 4 * kUs + kEach - 1);
}

}  // namespace
}  // namespace kvfs
