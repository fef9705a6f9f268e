// ApplyRepairs: writes the repairs planned in a Model (see model.h).
//
// Order, so that a crash during repair leaves a volume the next fsck run
// can still check and finish repairing, and never a name pointing at
// unwritten data:
//   1. copies of shared blocks (CloneOp) are written and the devices flushed;
//   2. undecodable records are deleted by key (synced);
//   3. every other change -- entries deleted and added, orphans reclaimed,
//      stale orphan records, rewritten and created inodes with recomputed
//      counts -- is one index batch, committed with a synced WAL, so the
//      namespace changes all at once or not at all.
//
// REQUIRES: `v` opened for repair (devices read-write and locked, index
// read-write). Returns the first error; what was applied before it stays.
#pragma once

#include "common/status.h"
#include "fsck/model.h"
#include "fsck/volume_access.h"

namespace kvfs::fsck {

// Number of index records that ApplyRepairs would write (0: nothing to do).
size_t PlannedWrites(const Model& m);

Status ApplyRepairs(Model& m, OpenedVolume& v);

}  // namespace kvfs::fsck
