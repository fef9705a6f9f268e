// A run of bytes on one device of a volume. Shared by alloc/ (which hands
// extents out), index/ (which records them) and device/ (which does I/O on
// them), so it lives below all three.
#pragma once

#include <cstdint>

namespace kvfs {

struct Extent {
  uint32_t device = 0;    // index of the device within the volume
  uint64_t byte_off = 0;  // absolute byte offset on that device, kBlockSize aligned
  uint64_t len = 0;       // bytes, a multiple of kBlockSize, > 0

  uint64_t end() const { return byte_off + len; }
  bool operator==(const Extent&) const = default;
};

}  // namespace kvfs
