// Extent checks on a loaded Model (after CheckNamespace):
//
// CheckFileExtents: per live inode, every extent is on a device of the
// volume, block aligned, non-empty and inside that device's data region;
// a file's extents are sorted by file offset, do not overlap in the file,
// stay inside one kFsChunkBytes chunk, and end by AlignUp(size); directories
// own no extents. Repair drops extents that cannot be valid (their bytes read
// as zeros), sorts, splits at chunk boundaries (reading the data to checksum
// the pieces), grows a size that extents reach past, and moves the file to
// /lost+found, saying all of it in the finding.
//
// FindSharedBlocks: one sort of every extent of the volume by device offset;
// groups of extents that overlap on the device are "clusters".
//
// ResolveSharedBlocks: for each cluster, reads each member and compares its
// crc32c: the first owner (lowest inode) whose checksum matches keeps the
// blocks; another owner whose checksum matches (or every other owner if none
// matches) gets a copy in free space (a CloneOp, written by repair before
// the index points at it); an owner whose checksum does not match lost its
// bytes to the keeper: its extent is dropped. Every owner that gives up the
// blocks is moved to /lost+found.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "fsck/finding.h"
#include "fsck/model.h"
#include "fsck/volume_access.h"

namespace kvfs::fsck {

void CheckFileExtents(Model& m, const OpenedVolume& v, std::vector<Finding>* out);

// One extent of a live file, as in Model::FinalExtents(inode)[slot].
struct Span {
  uint32_t device = 0;
  uint64_t off = 0;
  uint64_t end = 0;
  uint32_t inode = 0;
  uint32_t slot = 0;
  uint32_t crc32c = 0;
  uint64_t file_off = 0;
};

struct ExtentMap {
  std::vector<Span> spans;  // every extent of every live file, by (device, off)
  std::vector<std::pair<size_t, size_t>> clusters;  // [begin, end) of overlapping spans
  uint64_t bytes = 0;  // sum of span lengths
  // True if spans[i] lies in a cluster.
  std::vector<bool> shared;
};

ExtentMap FindSharedBlocks(const Model& m);

void ResolveSharedBlocks(Model& m, const OpenedVolume& v, const ExtentMap& map,
                         std::vector<Finding>* out);

}  // namespace kvfs::fsck
