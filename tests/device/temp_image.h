// Test helpers for device/: image files in a TempDir (tests/util) and
// aligned buffers.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "common/format.h"
#include "util/temp_dir.h"

namespace kvfs::device::testing {

using kvfs::testing::TempDir;

// Creates (or resizes) `path` to `bytes`, allocated on disk (fallocate), so
// O_DIRECT writes do not race block allocation in odd ways.
inline void MakeImage(const std::string& path, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
  ASSERT_EQ(::fallocate(fd, 0, 0, static_cast<off_t>(bytes)), 0) << std::strerror(errno);
  ::close(fd);
}

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<char, FreeDeleter>;

// kBlockSize-aligned heap memory (not part of any registered pool).
inline AlignedBuf Aligned(size_t len) {
  return AlignedBuf(static_cast<char*>(std::aligned_alloc(kBlockSize, len)));
}

// Fills `p` with bytes derived from `seed` (cheap: 8 bytes per step).
inline void FillPattern(char* p, size_t len, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < len; ++i) p[i] = static_cast<char>(x >> (i % 8));
}

}  // namespace kvfs::device::testing
