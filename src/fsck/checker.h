// Check: what fsck.kvfs does -- check a kvfs volume offline and, with
// `repair`, fix what it finds.
//
//   fsck::CheckOptions o;
//   o.devices = {"/var/tmp/kvfs.img"};
//   o.repair = true;
//   fsck::Report r = fsck::Check(o);
//   for (const auto& f : r.findings) puts(f.ToLine().c_str());
//   return r.ExitCode();  // fsck(8): 0, 1, 4, 8 (report.h)
//
// Phases: open (superblocks, index pairing; volume_access.h), load the index
// (model.h), namespace checks (namespace_check.h), extent checks and one
// sort of every extent for shared blocks (extent_check.h), with
// `verify_data` a read of every extent at queue depth comparing crc32c
// (data_verifier.h), then with `repair` the writes (repair.h) and a second
// metadata pass that must come out clean (anything it still finds is
// reported as not repaired).
//
// Check only (`repair` false) writes nothing, to the devices or the index,
// and works on a mounted volume (reading a consistent view of the index as
// of the start; Report::mounted says so). Repair refuses a mounted volume.
//
// Files whose data fails its checksum (--verify-data), whose extents are
// invalid or whose blocks another file owns are moved to /lost+found
// (created when needed) under "#<ino>-<old name>"; their damaged bytes are
// kept and their checksums rewritten to match, so they can be inspected.
// Nothing is deleted without a finding that says so.
//
// Thread safety: Check may run on any thread; it uses the calling thread
// plus the I/O engine's threads for --verify-data.
#pragma once

#include <string>
#include <vector>

#include "fsck/data_verifier.h"
#include "fsck/progress.h"
#include "fsck/report.h"

namespace kvfs::fsck {

struct CheckOptions {
  std::vector<std::string> devices;
  std::string index_dir;  // empty: "<first device>.index" for an image file
  bool repair = false;
  bool verify_data = false;
  Progress* progress = nullptr;  // borrowed; may be null
  VerifyOptions verify;
  size_t index_cache_bytes = 64 << 20;
};

Report Check(const CheckOptions& options);

}  // namespace kvfs::fsck
