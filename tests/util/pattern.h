// Pattern: deterministic test bytes that differ for every seed and position,
// so a misplaced or stale block never compares equal.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

namespace kvfs::testing {

inline std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; i += 4) {
    uint32_t v = rng();
    std::memcpy(&s[i], &v, std::min<size_t>(4, n - i));
  }
  return s;
}

}  // namespace kvfs::testing
