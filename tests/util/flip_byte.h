// Damages an image file the way a bad disk would: one byte of it flipped,
// written with O_DIRECT through the real BlockDevice. REQUIRES: the volume is
// not mounted (nothing else writes the image).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "common/format.h"
#include "common/large_buffer.h"
#include "device/block_device.h"

namespace kvfs::testing {

inline void FlipByte(const std::string& image, uint64_t byte_off) {
  auto dev = device::BlockDevice::Open(image, false);
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  LargeBuffer buf = LargeBuffer::Allocate(kBlockSize);
  ASSERT_TRUE(buf);
  const uint64_t blk = AlignDown(byte_off, kBlockSize);
  ASSERT_TRUE((*dev)->ReadAt(blk, buf.data(), kBlockSize).ok());
  buf.data()[byte_off - blk] ^= 0x5a;
  ASSERT_TRUE((*dev)->WriteAt(blk, buf.data(), kBlockSize).ok());
  ASSERT_TRUE((*dev)->Sync().ok());
}

}  // namespace kvfs::testing
