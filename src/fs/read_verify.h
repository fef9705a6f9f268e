// ReadVerifier: checks data read from the device against the crc32c the
// index keeps for each extent (mount option verify=on).
//
// The index holds one crc32c per extent (index/records.h: FileExtent), over
// all ext.len bytes on the device, so an extent can only be checked when it
// is read whole: with verification on, the read path reads every extent it
// touches completely (a partial read costs the rest of the extent, at most
// one chunk) and checks it before any of its bytes are handed out. A
// mismatch fails the read with EIO -- never wrong bytes -- and is logged
// once per inode (a connector retrying a damaged key must not flood the
// log); fsck.kvfs --verify-data names the file by path.
//
//   ReadVerifier v(options.verify_reads);
//   if (v.enabled()) st = v.Check(ino, fe, extent_bytes);   // OK or EIO
//
// A read that wants part of an extent would make every request read the
// whole extent again (the kernel sends 1 MiB requests that need not be
// chunk aligned: 2x the device reads, measured -40..50% at 8 readers). So on
// a cache miss the read path loads the whole chunk into the RAM cache once
// (AddVerifiedChunkLoad), checked as it lands, and serves the request from
// there; only when the cache has no room does it read the extents itself.
//
// Thread safety: Check() may be called from any thread concurrently (it runs
// on engine completion threads).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "device/block_io.h"
#include "fs/chunk_cache.h"
#include "index/records.h"

namespace kvfs::fs {

class ReadVerifier {
 public:
  explicit ReadVerifier(bool enabled) : enabled_(enabled) {}

  bool enabled() const { return enabled_; }

  // `data` holds the fe.ext.len bytes read from fe.ext. Returns OK if their
  // crc32c is fe.crc32c, else EIO naming inode `ino` and the file offset
  // (and logs the first mismatch of each inode at error level).
  Status Check(uint64_t ino, const index::FileExtent& fe, const char* data);

 private:
  const bool enabled_;
  std::mutex mu_;
  std::unordered_set<uint64_t> logged_;  // GUARDED_BY(mu_): inodes already logged
};

// Appends to `reqs` one read per extent of the chunk that starts at file
// byte `chunk_start`, into `entry` (a loading cache entry whose capacity
// covers every extent); each extent is checked with `verifier` as it lands.
// When the last read has completed: entry->Finish(every read succeeded and
// matched), then done() -- exactly once, on an engine thread. `extents` is
// copied; `verifier` must outlive the reads.
void AddVerifiedChunkLoad(ReadVerifier& verifier, uint64_t ino, uint64_t chunk_start,
                          const std::vector<index::FileExtent>& extents,
                          std::shared_ptr<CachedChunk> entry, std::function<void()> done,
                          std::vector<device::IoRequest>* reqs);

}  // namespace kvfs::fs
