#include "common/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace kvfs {

namespace {

constexpr uint64_t kSubBuckets = uint64_t{1} << kHistogramSubBucketBits;
constexpr uint64_t kMinValue = uint64_t{1} << kHistogramMinExp;  // bucket 1 starts here
constexpr uint64_t kMaxValue = uint64_t{1} << kHistogramMaxExp;  // overflow bucket from here
constexpr size_t kOverflow = kHistogramBuckets - 1;

static_assert(kHistogramMinExp >= kHistogramSubBucketBits,
              "sub-buckets of the first octave must be at least 1 ns wide");
static_assert(kHistogramMaxExp < 64);

// Lowers (raises) `a` to `v` if `v` is smaller (larger).
void StoreMin(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}
void StoreMax(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

}  // namespace

size_t HistogramSnapshot::BucketFor(uint64_t ns) {
  if (ns < kMinValue) return 0;
  if (ns >= kMaxValue) return kOverflow;
  const unsigned exp = static_cast<unsigned>(std::bit_width(ns)) - 1;  // 2^exp <= ns
  const uint64_t sub = (ns >> (exp - kHistogramSubBucketBits)) - kSubBuckets;
  return 1 + (exp - kHistogramMinExp) * kSubBuckets + sub;
}

uint64_t HistogramSnapshot::BucketLowerNs(size_t i) {
  if (i == 0) return 0;
  if (i >= kOverflow) return kMaxValue;
  const uint64_t exp = kHistogramMinExp + (i - 1) / kSubBuckets;
  const uint64_t sub = (i - 1) % kSubBuckets;
  return (kSubBuckets + sub) << (exp - kHistogramSubBucketBits);
}

uint64_t HistogramSnapshot::BucketUpperNs(size_t i) {
  if (i >= kOverflow) return UINT64_MAX;
  return BucketLowerNs(i + 1);
}

uint64_t HistogramSnapshot::Percentile(double p) const {
  if (count_ == 0) return 0;
  p = std::clamp(p, 0.0, 100.0);
  // The rank (1-based) of the value wanted.
  uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  // The smallest and the largest value are known exactly.
  if (rank == count_) return max_ns_;
  if (rank == 1) return std::min(min_ns_, max_ns_);
  uint64_t below = 0;
  for (size_t i = 0; i < kBucketCount; ++i) {
    const uint64_t c = buckets_[i];
    if (below + c < rank) {
      below += c;
      continue;
    }
    // The values of a bucket are taken as spread evenly over its width: the
    // k-th of c sits at the middle of the k-th c-th of the bucket.
    const double lo = static_cast<double>(BucketLowerNs(i));
    const double hi = i == kOverflow ? static_cast<double>(max_ns_) : BucketUpperNs(i);
    const double k = static_cast<double>(rank - below);
    double v = lo + (hi - lo) * (k - 0.5) / static_cast<double>(c);
    // min/max may lag the buckets in a snapshot taken while others record:
    // never let them cross.
    const double mx = static_cast<double>(max_ns_);
    const double mn = std::min(static_cast<double>(min_ns_), mx);
    return static_cast<uint64_t>(std::clamp(v, mn, mx));
  }
  return max_ns_;  // not reached: the buckets add up to count_
}

uint64_t HistogramSnapshot::CountBelow(uint64_t ns) const {
  if (ns == UINT64_MAX) return count_;
  uint64_t n = 0;
  for (size_t i = 0; i < kBucketCount && BucketUpperNs(i) <= ns; ++i) n += buckets_[i];
  return n;
}

void HistogramSnapshot::Merge(const HistogramSnapshot& o) {
  for (size_t i = 0; i < kBucketCount; ++i) buckets_[i] += o.buckets_[i];
  count_ += o.count_;
  sum_ns_ += o.sum_ns_;
  min_ns_ = std::min(min_ns_, o.min_ns_);
  max_ns_ = std::max(max_ns_, o.max_ns_);
}

void Histogram::Record(uint64_t ns) {
  buckets_[HistogramSnapshot::BucketFor(ns)].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  StoreMin(min_ns_, ns);
  StoreMax(max_ns_, ns);
}

HistogramSnapshot Histogram::Snapshot() const {
  HistogramSnapshot s;
  for (size_t i = 0; i < kHistogramBuckets; ++i) {
    s.buckets_[i] = buckets_[i].load(std::memory_order_relaxed);
    s.count_ += s.buckets_[i];
  }
  s.sum_ns_ = sum_ns_.load(std::memory_order_relaxed);
  s.min_ns_ = min_ns_.load(std::memory_order_relaxed);
  s.max_ns_ = max_ns_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kvfs
