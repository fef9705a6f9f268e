#include "alloc/extent_allocator.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <iterator>
#include <string>

#include "common/format.h"

namespace kvfs::alloc {
namespace {

std::string Describe(const Extent& e) {
  return "extent dev " + std::to_string(e.device) + " [" + std::to_string(e.byte_off) + ", +" +
         std::to_string(e.len) + ")";
}

// Stable LSD radix sort of `v` by `key(x)`, 11 bits per pass, skipping the
// passes above the highest key bit. Rebuild sorts up to millions of extents
// twice, and keys are block numbers (~32 bits), so three linear passes beat
// std::sort's n log n comparisons by several times (bench/alloc_bench.cc).
template <typename T, typename KeyFn>
void RadixSort(std::vector<T>& v, KeyFn key) {
  if (v.size() < 1024) {
    std::stable_sort(v.begin(), v.end(), [&](const T& a, const T& b) { return key(a) < key(b); });
    return;
  }
  constexpr int kBits = 11;
  constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  uint64_t all_bits = 0;
  for (const T& x : v) all_bits |= key(x);
  std::vector<T> tmp(v.size());
  std::vector<size_t> start(kMask + 1);
  for (int shift = 0; shift < 64 && (all_bits >> shift) != 0; shift += kBits) {
    std::fill(start.begin(), start.end(), 0);
    for (const T& x : v) ++start[(key(x) >> shift) & kMask];
    size_t sum = 0;
    for (size_t& c : start) sum += std::exchange(c, sum);
    for (const T& x : v) tmp[start[(key(x) >> shift) & kMask]++] = x;
    v.swap(tmp);
  }
}

}  // namespace

ExtentAllocator::ExtentAllocator(uint32_t device, uint64_t region_start, uint64_t region_len)
    : device_(device), region_start_(region_start), region_len_(region_len) {
  assert(region_start % kBlockSize == 0 && region_len % kBlockSize == 0);
  assert(region_start + region_len >= region_start);
  if (region_len_ > 0) {
    by_offset_.emplace(region_start_, region_len_);
    by_size_.emplace(region_len_, region_start_);
  }
  free_bytes_ = region_len_;
}

Status ExtentAllocator::CheckExtent(const Extent& e, const char* op) const {
  if (e.device != device_) {
    return Status::Error(EINVAL, std::string(op) + ": " + Describe(e) +
                                     " is not on this allocator's device " +
                                     std::to_string(device_));
  }
  if (e.len == 0 || e.byte_off % kBlockSize != 0 || e.len % kBlockSize != 0) {
    return Status::Error(EINVAL, std::string(op) + ": " + Describe(e) + " is empty or not " +
                                     std::to_string(kBlockSize) + "-byte aligned");
  }
  // Written so that no sum can overflow.
  if (e.byte_off < region_start_ || e.byte_off - region_start_ > region_len_ ||
      e.len > region_len_ - (e.byte_off - region_start_)) {
    return Status::Error(
        EINVAL, std::string(op) + ": " + Describe(e) + " is outside the data region [" +
                    std::to_string(region_start_) + ", +" + std::to_string(region_len_) + ")");
  }
  return Status::OK();
}

Status ExtentAllocator::Rebuild(std::vector<Extent> used) {
  // Everything up to the swap works on local state without mu_, so a failed
  // rebuild changes nothing and other threads are not stalled by the sort.
  auto reject = [](const Status& st) { return Status::Error(EUCLEAN, st.context()); };

  // This device's extents as (off, len), validated.
  using Run = std::pair<uint64_t, uint64_t>;
  std::vector<Run> runs;
  runs.reserve(used.size());
  for (const Extent& e : used) {
    if (e.device != device_) continue;
    Status st = CheckExtent(e, "rebuild");
    if (!st.ok()) return reject(st);
    runs.emplace_back(e.byte_off, e.len);
  }
  used = {};  // release memory before the maps grow
  const uint64_t base = region_start_;
  RadixSort(runs, [base](const Run& r) { return (r.first - base) / kBlockSize; });

  // Gaps between consecutive used extents, in offset order, as (off, len).
  std::vector<Run> gaps;
  gaps.reserve(runs.size() + 1);
  uint64_t cursor = region_start_;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto [off, len] = runs[i];
    if (off < cursor) {
      // Only possible from the second extent on: cursor starts at the region.
      return Status::Error(
          EUCLEAN, "rebuild: " + Describe(Extent{device_, runs[i - 1].first, runs[i - 1].second}) +
                       " overlaps " + Describe(Extent{device_, off, len}));
    }
    if (off > cursor) gaps.emplace_back(cursor, off - cursor);
    cursor = off + len;
  }
  const uint64_t region_end = region_start_ + region_len_;
  if (cursor < region_end) gaps.emplace_back(cursor, region_end - cursor);
  runs = {};

  // Offset order is the gaps' natural order: hinted inserts at end() are O(1).
  ByOffset by_offset;
  uint64_t free_bytes = 0;
  for (const auto& [off, len] : gaps) {
    by_offset.emplace_hint(by_offset.end(), off, len);
    free_bytes += len;
  }
  // Size order: swap to (len, off); a stable sort by length of input in
  // offset order is (len, off) order. The range constructor of a set appends
  // sorted input in linear time.
  for (auto& g : gaps) std::swap(g.first, g.second);
  RadixSort(gaps, [](const Run& r) { return r.first / kBlockSize; });
  BySize by_size(gaps.begin(), gaps.end());
  gaps = {};

  {
    std::lock_guard<std::mutex> lock(mu_);
    by_offset_.swap(by_offset);
    by_size_.swap(by_size);
    free_bytes_ = free_bytes;
  }
  // The old maps are destroyed here, outside mu_.
  return Status::OK();
}

void ExtentAllocator::Resize(uint64_t off, uint64_t old_len, uint64_t new_len) {
  auto node = by_size_.extract({old_len, off});
  assert(!node.empty());
  node.value().first = new_len;
  by_size_.insert(std::move(node));
}

void ExtentAllocator::TakeFront(BySize::iterator it, uint64_t len) {
  const uint64_t run_len = it->first;
  const uint64_t off = it->second;
  assert(len > 0 && len <= run_len);
  auto oit = by_offset_.find(off);
  assert(oit != by_offset_.end() && oit->second == run_len);
  if (len == run_len) {
    by_size_.erase(it);
    by_offset_.erase(oit);
  } else {
    // Reuse both nodes for the remainder: no allocation on the hot path, and
    // the remainder keeps its place between the same neighbours.
    auto hint = std::next(oit);
    auto onode = by_offset_.extract(oit);
    onode.key() = off + len;
    onode.mapped() = run_len - len;
    by_offset_.insert(hint, std::move(onode));
    auto snode = by_size_.extract(it);
    snode.value() = {run_len - len, off + len};
    by_size_.insert(std::move(snode));
  }
  free_bytes_ -= len;
}

Result<std::vector<Extent>> ExtentAllocator::Allocate(uint64_t bytes) {
  if (bytes == 0) return Status::Error(EINVAL, "allocate: 0 bytes");
  if (bytes > UINT64_MAX - (kBlockSize - 1)) {
    return Status::Error(ENOSPC, "allocate: " + std::to_string(bytes) + " bytes");
  }
  const uint64_t want = AlignUp(bytes, kBlockSize);

  std::vector<Extent> out;
  std::lock_guard<std::mutex> lock(mu_);
  // Checked first so that the fallback below always completes: nothing is
  // taken unless all of it can be.
  if (want > free_bytes_) {
    return Status::Error(ENOSPC, "allocate " + std::to_string(want) + " bytes on device " +
                                     std::to_string(device_) + ": " + std::to_string(free_bytes_) +
                                     " bytes free");
  }
  uint64_t rest = want;
  while (true) {
    // Best fit: the smallest run that holds the rest, lowest offset among
    // equals.
    auto fit = by_size_.lower_bound({rest, 0});
    if (fit != by_size_.end()) {
      out.push_back(Extent{device_, fit->second, rest});
      TakeFront(fit, rest);
      break;
    }
    // No run is big enough: take the largest whole and go on.
    auto largest = std::prev(by_size_.end());
    out.push_back(Extent{device_, largest->second, largest->first});
    rest -= largest->first;
    TakeFront(largest, largest->first);
  }
  if (out.size() > 1) {
    std::sort(out.begin(), out.end(),
              [](const Extent& a, const Extent& b) { return a.byte_off < b.byte_off; });
  }
  return out;
}

Status ExtentAllocator::Free(const Extent& e) {
  KVFS_RETURN_IF_ERROR(CheckExtent(e, "free"));
  std::lock_guard<std::mutex> lock(mu_);
  auto next = by_offset_.upper_bound(e.byte_off);
  auto prev = next == by_offset_.begin() ? by_offset_.end() : std::prev(next);
  const bool has_prev = prev != by_offset_.end();
  if (has_prev && prev->first + prev->second > e.byte_off) {
    return Status::Error(EINVAL, "free: " + Describe(e) + " overlaps free run [" +
                                     std::to_string(prev->first) + ", +" +
                                     std::to_string(prev->second) + ") (double free?)");
  }
  if (next != by_offset_.end() && next->first < e.end()) {
    return Status::Error(EINVAL, "free: " + Describe(e) + " overlaps free run [" +
                                     std::to_string(next->first) + ", +" +
                                     std::to_string(next->second) + ") (double free?)");
  }
  const bool merge_prev = has_prev && prev->first + prev->second == e.byte_off;
  const bool merge_next = next != by_offset_.end() && next->first == e.end();
  if (merge_prev && merge_next) {
    const uint64_t old_len = prev->second;
    const uint64_t new_len = old_len + e.len + next->second;
    by_size_.erase({next->second, next->first});
    by_offset_.erase(next);
    prev->second = new_len;
    Resize(prev->first, old_len, new_len);
  } else if (merge_prev) {
    const uint64_t old_len = prev->second;
    prev->second += e.len;
    Resize(prev->first, old_len, prev->second);
  } else if (merge_next) {
    // The run now starts earlier: rekey its nodes in both indexes.
    const uint64_t old_off = next->first;
    const uint64_t new_len = next->second + e.len;
    auto hint = std::next(next);
    auto onode = by_offset_.extract(next);
    onode.key() = e.byte_off;
    onode.mapped() = new_len;
    by_offset_.insert(hint, std::move(onode));
    auto snode = by_size_.extract({new_len - e.len, old_off});
    assert(!snode.empty());
    snode.value() = {new_len, e.byte_off};
    by_size_.insert(std::move(snode));
  } else {
    by_offset_.emplace_hint(next, e.byte_off, e.len);
    by_size_.emplace(e.len, e.byte_off);
  }
  free_bytes_ += e.len;
  return Status::OK();
}

Status ExtentAllocator::Reserve(const Extent& e) {
  KVFS_RETURN_IF_ERROR(CheckExtent(e, "reserve"));
  std::lock_guard<std::mutex> lock(mu_);
  // The run that could contain e is the last one starting at or before it.
  auto next = by_offset_.upper_bound(e.byte_off);
  if (next == by_offset_.begin()) {
    return Status::Error(EEXIST, "reserve: " + Describe(e) + " is not free");
  }
  auto run = std::prev(next);
  const uint64_t run_off = run->first;
  const uint64_t run_len = run->second;
  if (run_off + run_len < e.end()) {
    return Status::Error(EEXIST, "reserve: " + Describe(e) + " is not (entirely) free");
  }
  // Split [run_off, run_end) into head [run_off, e) and tail [e.end, run_end).
  const uint64_t head = e.byte_off - run_off;
  const uint64_t tail = run_off + run_len - e.end();
  if (head > 0) {
    run->second = head;
    Resize(run_off, run_len, head);
  } else {
    by_size_.erase({run_len, run_off});
    by_offset_.erase(run);
  }
  if (tail > 0) {
    by_offset_.emplace_hint(next, e.end(), tail);
    by_size_.emplace(tail, e.end());
  }
  free_bytes_ -= e.len;
  return Status::OK();
}

uint64_t ExtentAllocator::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_bytes_;
}

uint64_t ExtentAllocator::largest_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

uint64_t ExtentAllocator::free_extent_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_offset_.size();
}

std::vector<Extent> ExtentAllocator::FreeExtents() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Extent> out;
  out.reserve(by_offset_.size());
  for (const auto& [off, len] : by_offset_) out.push_back(Extent{device_, off, len});
  return out;
}

}  // namespace kvfs::alloc
