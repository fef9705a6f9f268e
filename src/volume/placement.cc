#include "volume/placement.h"

#include <algorithm>
#include <numeric>

namespace kvfs::volume {

namespace {

// splitmix64's finalizer: consecutive inode numbers map to unrelated values.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint32_t PreferredDevice(const PlacementHint& hint, uint32_t n) {
  return static_cast<uint32_t>((Mix(hint.seed) % n + hint.chunk % n) % n);
}

std::vector<uint32_t> PlacementOrder(const PlacementHint& hint,
                                     const std::vector<uint64_t>& free_bytes,
                                     const std::vector<uint64_t>& region_bytes) {
  const uint32_t n = static_cast<uint32_t>(free_bytes.size());
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  if (n == 0) return order;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return free_bytes[a] > free_bytes[b]; });
  const uint32_t pref = PreferredDevice(hint, n);
  const uint32_t most = order[0];
  const uint64_t slack = region_bytes[most] / kBalanceSlack;
  if (free_bytes[pref] + slack >= free_bytes[most]) {
    order.erase(std::find(order.begin(), order.end(), pref));
    order.insert(order.begin(), pref);
  }
  return order;
}

uint64_t NameSeed(uint64_t parent_ino, const void* name, size_t len) {
  // FNV-1a over the name, then mixed with the parent.
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto* p = static_cast<const unsigned char*>(name);
  for (size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return Mix(h ^ Mix(parent_ino));
}

}  // namespace kvfs::volume
