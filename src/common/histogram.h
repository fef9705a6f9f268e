// Histogram: a lock-free latency histogram with log-linear buckets.
//
// Values are nanoseconds. Bucket 0 holds [0, 1024 ns); then each power of two
// from 2^10 ns (~1 us) to 2^37 ns (~137 s) is split into 16 equal buckets, so
// a bucket is at most 1/16 (6.25%) of its values wide; the last bucket holds
// everything from 2^37 ns up. That is 434 buckets, ~3.5 KiB per histogram.
//
//   Histogram h;                        // shared by many threads
//   h.Record(elapsed_ns);               // hot path: two relaxed atomic adds
//   HistogramSnapshot s = h.Snapshot();
//   uint64_t p99 = s.Percentile(99);    // ns, within a bucket's width
//
// Prometheus: a cumulative `le` bucket is CountBelow(bound), exact when the
// bound is a bucket boundary (every power of two from 1024 ns is one);
// sum_ns() and count() give `_sum` and `_count`.
//
// Thread safety: Record() and Snapshot() may run concurrently from any
// threads. A snapshot taken while others record is not one instant: count()
// is always the sum of its buckets, but sum_ns(), min_ns() and max_ns() may
// include a few records the buckets miss, or the reverse.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace kvfs {

inline constexpr unsigned kHistogramSubBucketBits = 4;  // 16 buckets per octave
inline constexpr unsigned kHistogramMinExp = 10;        // 2^10 ns: first octave
inline constexpr unsigned kHistogramMaxExp = 37;        // 2^37 ns: overflow from here
inline constexpr size_t kHistogramBuckets =
    2 + (kHistogramMaxExp - kHistogramMinExp) * (size_t{1} << kHistogramSubBucketBits);

// A copy of a Histogram's counts. A value; cheap enough to return by value.
class HistogramSnapshot {
 public:
  static constexpr size_t kBucketCount = kHistogramBuckets;

  // Index of the bucket that `ns` falls into.
  static size_t BucketFor(uint64_t ns);
  // Bucket `i` holds [BucketLowerNs(i), BucketUpperNs(i)). The last bucket's
  // upper bound is UINT64_MAX. REQUIRES: i < kBucketCount.
  static uint64_t BucketLowerNs(size_t i);
  static uint64_t BucketUpperNs(size_t i);

  uint64_t count() const { return count_; }
  uint64_t sum_ns() const { return sum_ns_; }
  // 0 when count() == 0.
  uint64_t min_ns() const { return count_ ? min_ns_ : 0; }
  uint64_t max_ns() const { return max_ns_; }
  double mean_ns() const { return count_ ? static_cast<double>(sum_ns_) / count_ : 0.0; }
  const std::array<uint64_t, kBucketCount>& buckets() const { return buckets_; }

  // The value below which `p` percent of the recorded values lie (p in
  // [0, 100]; 50, 90, 99, 99.9 ...), interpolated inside its bucket and
  // clamped to [min_ns(), max_ns()], so the error is at most the bucket's
  // width (6.25% of the value). Percentile(0) and Percentile(100) are
  // min_ns() and max_ns() exactly. 0 when count() == 0.
  uint64_t Percentile(double p) const;
  // Number of recorded values < `ns`: exact when `ns` is a bucket boundary
  // (a BucketLowerNs(i), e.g. any power of two from 1024); otherwise the
  // values of the buckets wholly below `ns` (the bucket holding `ns` is left
  // out). CountBelow(UINT64_MAX) == count().
  uint64_t CountBelow(uint64_t ns) const;

  // Adds `o`'s counts to this one (totals over lanes, say).
  void Merge(const HistogramSnapshot& o);

 private:
  friend class Histogram;
  std::array<uint64_t, kBucketCount> buckets_{};
  uint64_t count_ = 0;
  uint64_t sum_ns_ = 0;
  uint64_t min_ns_ = std::numeric_limits<uint64_t>::max();
  uint64_t max_ns_ = 0;
};

class Histogram {
 public:
  Histogram() = default;
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts one value. Lock-free, wait-free except for a rare CAS retry when
  // it sets a new minimum or maximum.
  void Record(uint64_t ns);
  HistogramSnapshot Snapshot() const;

 private:
  std::array<std::atomic<uint64_t>, kHistogramBuckets> buckets_{};
  std::atomic<uint64_t> sum_ns_{0};
  std::atomic<uint64_t> min_ns_{std::numeric_limits<uint64_t>::max()};
  std::atomic<uint64_t> max_ns_{0};
};

}  // namespace kvfs
