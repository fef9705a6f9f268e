// Lane: the class of an I/O request, which decides its queue, its in-flight
// bounds and its priority in the Scheduler (scheduler.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvfs::io {

enum class Lane : uint8_t {
  kMeta = 0,  // lookups and other small metadata I/O a caller waits for
  kRead,      // foreground reads: a caller (the connector) waits for them
  kPrefetch,  // speculative reads into the RAM cache; nobody waits yet
  kWrite,     // write-behind of staged data
  kDelete,    // freeing space (discards, zeroing); nobody waits
};
inline constexpr size_t kLaneCount = 5;

// The order in which queued requests get device capacity as it frees up:
// a foreground read first, prefetch last (see Scheduler).
inline constexpr Lane kLanePriority[kLaneCount] = {Lane::kRead, Lane::kMeta, Lane::kDelete,
                                                   Lane::kWrite, Lane::kPrefetch};

// "meta", "read", "prefetch", "write", "delete"; "unknown" for anything else.
inline const char* LaneName(Lane lane) {
  switch (lane) {
    case Lane::kMeta:
      return "meta";
    case Lane::kRead:
      return "read";
    case Lane::kPrefetch:
      return "prefetch";
    case Lane::kWrite:
      return "write";
    case Lane::kDelete:
      return "delete";
  }
  return "unknown";
}

inline constexpr size_t LaneIndex(Lane lane) { return static_cast<size_t>(lane); }

}  // namespace kvfs::io
