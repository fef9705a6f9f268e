// StagedInodes: the inodes that have staged chunks, so that a writer that
// finds no free staging buffer can push staged data out and wait for the
// buffers its writes give back (FileSystem::Impl::AcquireBuffer), instead
// of waiting for buffers nobody is writing out.
//
// Holds weak references: an inode that left memory meanwhile is skipped.
//
// Thread safety: any thread. Its mutex is taken last (after an
// InodeState's mu) and never held while calling out.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "fs/inode_table.h"

namespace kvfs::fs {

class StagedInodes {
 public:
  // `inode` has staged a chunk (again: added once).
  void Add(const InodeRef& inode) EXCLUDES(mu_);
  // The inodes added since the last Take that are still in memory; the
  // set is empty after (a caller stages again, and adds again).
  std::vector<InodeRef> Take() EXCLUDES(mu_);

 private:
  Mutex mu_;
  std::unordered_map<uint64_t, std::weak_ptr<InodeState>> inodes_ GUARDED_BY(mu_);
};

}  // namespace kvfs::fs
