// ExtentAllocator: free space of one device's data region, in kBlockSize
// units.
//
// Free space is never persisted. At mount it is rebuilt as the data region
// minus every extent the index references (Rebuild()), so a crash can never
// leave the allocator and the index disagreeing. alloc/ knows nothing of the
// index: the caller hands it the live extents.
//
// Allocate() prefers one contiguous extent (the smallest free extent that
// fits: best fit) and falls back to several extents, largest first. It never
// hands out a range that overlaps one already handed out and not freed.
//
//   ExtentAllocator a(/*device=*/0, kDataStart, region_len);
//   KVFS_RETURN_IF_ERROR(a.Rebuild(extents_from_index));
//   KVFS_ASSIGN_OR_RETURN(std::vector<Extent> got, a.Allocate(24 << 20));
//   ... write, commit to the index, then free the old version's extents:
//   KVFS_RETURN_IF_ERROR(a.Free(old_extent));
//
// Cost: Allocate/Free/Reserve are O(log n) in the number of free extents
// (Allocate O(k log n) when it returns k extents). Rebuild is O(u log u) for
// u used extents (one sort), then linear; 1,000,000 extents take well under a
// second (bench/alloc_bench.cc).
//
// Thread safety: every method is safe from any thread (one internal mutex,
// never held while calling out). Rebuild() computes the new state without the
// mutex and swaps it in; an Allocate/Free racing with Rebuild is applied to
// the old or the new state, so callers rebuild before handing out space.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "common/extent.h"
#include "common/status.h"

namespace kvfs::alloc {

class ExtentAllocator {
 public:
  // Manages [region_start, region_start + region_len) of device `device`.
  // Both must be kBlockSize aligned (checked by assert; the caller takes them
  // from a validated superblock). Initially all free.
  ExtentAllocator(uint32_t device, uint64_t region_start, uint64_t region_len);

  ExtentAllocator(const ExtentAllocator&) = delete;
  ExtentAllocator& operator=(const ExtentAllocator&) = delete;

  // Resets free space to the region minus `used`. `used` may be in any
  // order; extents of other devices are ignored. EUCLEAN (with the offending
  // extents in the message) if an extent lies outside the region, is
  // misaligned or empty, or overlaps another; the allocator is then
  // unchanged.
  Status Rebuild(std::vector<Extent> used);

  // `bytes` is rounded up to kBlockSize. Returns extents whose lengths sum to
  // exactly the rounded size, in ascending offset order when more than one.
  // The fallback takes the largest free extents whole until the rest fits in
  // one free extent, then best-fits the rest, so it returns as few extents
  // as possible. ENOSPC (nothing allocated) if free space is short. EINVAL
  // for 0 bytes.
  Result<std::vector<Extent>> Allocate(uint64_t bytes);

  // Returns an extent to free space, merging with neighbours. EINVAL (and no
  // change) if any part of it is already free or outside the region, if it
  // is misaligned or empty, or if it names another device. Part of an
  // allocated extent may be freed on its own.
  Status Free(const Extent& e);

  // Marks a specific range used (e.g. while replaying). EEXIST (and no
  // change) if any part of it is not free; EINVAL if it is misaligned,
  // empty, outside the region or names another device.
  Status Reserve(const Extent& e);

  uint64_t free_bytes() const;
  // Length in bytes of the largest free extent; 0 when full.
  uint64_t largest_free() const;
  // Number of maximal free runs (neighbours are always merged).
  uint64_t free_extent_count() const;
  uint64_t region_len() const { return region_len_; }
  uint32_t device() const { return device_; }

  // A snapshot of the free extents in ascending offset order (for fsck,
  // stats and tests). O(n).
  std::vector<Extent> FreeExtents() const;

 private:
  // Free runs, indexed twice. Offsets and lengths are bytes (block aligned).
  using ByOffset = std::map<uint64_t, uint64_t>;           // off -> len
  using BySize = std::set<std::pair<uint64_t, uint64_t>>;  // (len, off)

  // Checks alignment, non-emptiness, device and region bounds of `e`.
  // `op` names the caller in the message.
  Status CheckExtent(const Extent& e, const char* op) const;

  // REQUIRES: mu_ held. Takes `len` bytes from the start of the free run
  // `it` points at (len <= its length), keeping both indexes in step.
  void TakeFront(BySize::iterator it, uint64_t len);
  // REQUIRES: mu_ held. Replaces the by-size entry (old_len, off) with
  // (new_len, off), reusing its node.
  void Resize(uint64_t off, uint64_t old_len, uint64_t new_len);

  const uint32_t device_;
  const uint64_t region_start_;
  const uint64_t region_len_;
  mutable std::mutex mu_;
  ByOffset by_offset_;       // GUARDED_BY(mu_)
  BySize by_size_;           // GUARDED_BY(mu_); same runs as by_offset_
  uint64_t free_bytes_ = 0;  // GUARDED_BY(mu_); sum of the runs' lengths
};

}  // namespace kvfs::alloc
