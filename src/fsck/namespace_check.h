// Namespace checks on a loaded Model: the root, every directory entry (its
// directory and its inode exist, the directory is one), names per inode
// (directories and files have exactly one: kvfs has no hard links), orphans,
// stored counts (link counts, directory entry counts, parent fields, file
// types) and reachability from the root (unnamed inodes, directory loops).
//
// Each problem becomes one Finding and a planned repair in the model:
// dangling and misplaced entries are deleted, extra names removed, stale
// orphan records dropped, orphans reclaimed, unreachable inodes and broken
// loops linked into /lost+found, counts recomputed (Model::ComputeFinal).
// Count findings compare stored values with the entries as stored; the
// counts a repair changes as a consequence of another fix are not separate
// findings.
//
// `mounted`: the volume is in use, so orphans are open files, reported as
// Severity::kInfo and not reclaimed.
#pragma once

#include <vector>

#include "fsck/finding.h"
#include "fsck/model.h"

namespace kvfs::fsck {

void CheckNamespace(Model& m, bool mounted, std::vector<Finding>* out);

}  // namespace kvfs::fsck
