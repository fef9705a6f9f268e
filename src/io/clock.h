// The clock of io/: steady nanoseconds, for queue and wait times.
#pragma once

#include <chrono>
#include <cstdint>

namespace kvfs::io {

inline uint64_t SteadyNowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace kvfs::io
