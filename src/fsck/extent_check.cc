#include "fsck/extent_check.h"

#include <algorithm>
#include <map>
#include <memory>

#include "alloc/extent_allocator.h"
#include "common/crc32c.h"
#include "common/format.h"

namespace kvfs::fsck {

namespace {

using namespace inode_flags;  // NOLINT

// Longest extent crossing chunk boundaries that repair splits (reading it
// whole) rather than drops.
constexpr uint64_t kMaxSplitBytes = 64 * kFsChunkBytes;

std::string Range(const Extent& e) {
  return "device " + std::to_string(e.device) + " bytes [" + std::to_string(e.byte_off) + ", " +
         std::to_string(e.byte_off + e.len) + ")";
}

std::string ExtentName(const ExtentRec& fe) {
  return "extent at file offset " + std::to_string(fe.file_off) + " (" + Range(fe.ext) + ")";
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : "; ") + x;
  return s;
}

// Why `fe` cannot be a valid extent of this volume, or "".
std::string Invalid(const ExtentRec& fe, const OpenedVolume& v) {
  const Extent& e = fe.ext;
  if (e.device >= v.superblocks.size()) {
    return "is on device " + std::to_string(e.device) + " of a volume with " +
           std::to_string(v.superblocks.size()) + " device(s)";
  }
  if (e.len == 0) return "is empty";
  if (e.byte_off % kBlockSize || e.len % kBlockSize || fe.file_off % kBlockSize) {
    return "is not aligned to " + std::to_string(kBlockSize) + " bytes";
  }
  const device::Superblock& sb = v.sb(e.device);
  if (e.byte_off < sb.data_start || e.byte_off + e.len < e.byte_off ||
      e.byte_off + e.len > sb.data_start + sb.data_length) {
    return "lies outside the data region [" + std::to_string(sb.data_start) + ", " +
           std::to_string(sb.data_start + sb.data_length) + ")";
  }
  if (fe.file_off + e.len < fe.file_off) return "has a file offset that overflows";
  return "";
}

// Splits `fe` at chunk boundaries, checksumming the pieces from the data.
// Sets *crc_ok to whether the stored checksum matched the bytes.
Result<std::vector<ExtentRec>> SplitAtChunks(const ExtentRec& fe, const OpenedVolume& v,
                                             bool* crc_ok) {
  KVFS_ASSIGN_OR_RETURN(AlignedBuffer data, ReadExtent(v, fe.ext));
  *crc_ok = Crc32c(data.get(), fe.ext.len) == fe.crc32c;
  std::vector<ExtentRec> out;
  uint64_t pos = 0;
  while (pos < fe.ext.len) {
    const uint64_t foff = fe.file_off + pos;
    const uint64_t n = std::min(fe.ext.len - pos, AlignUp(foff + 1, kFsChunkBytes) - foff);
    ExtentRec p;
    p.file_off = foff;
    p.ext = {fe.ext.device, fe.ext.byte_off + pos, n};
    p.crc32c = Crc32c(data.get() + pos, n);
    out.push_back(p);
    pos += n;
  }
  return out;
}

}  // namespace

void CheckFileExtents(Model& m, const OpenedVolume& v, std::vector<Finding>* out) {
  const auto n = static_cast<uint32_t>(m.inodes.size());
  for (uint32_t i = 0; i < n; ++i) {
    InodeRec& r = m.inodes[i];
    if ((r.flags & kReclaim) || r.ext_count == 0) continue;
    if (r.is_dir()) {
      uint64_t bytes = 0;
      for (const ExtentRec& fe : m.FinalExtents(i)) bytes += fe.ext.len;
      Finding f;
      f.kind = FindingKind::kDirExtents;
      f.ino = r.ino;
      f.path = m.PathOf(i);
      f.problem = "directory owns " + std::to_string(r.ext_count) + " extent(s) (" +
                  std::to_string(bytes) + " bytes)";
      f.fix = "drop them (their blocks become free)";
      out->push_back(std::move(f));
      m.SetExtents(i, {});
      continue;
    }
    std::vector<ExtentRec> list = m.FinalExtents(i);
    std::vector<std::string> problems, fixes;
    std::vector<ExtentRec> kept;
    bool dropped = false;
    for (const ExtentRec& fe : list) {
      std::string why = Invalid(fe, v);
      if (why.empty()) {
        kept.push_back(fe);
      } else {
        problems.push_back(ExtentName(fe) + " " + why);
        dropped = true;
      }
    }
    auto by_off = [](const ExtentRec& a, const ExtentRec& b) { return a.file_off < b.file_off; };
    if (!std::is_sorted(kept.begin(), kept.end(), by_off)) {
      problems.push_back("extents are not in file-offset order");
      fixes.push_back("sort them");
      std::stable_sort(kept.begin(), kept.end(), by_off);
    }
    std::vector<ExtentRec> split;
    bool did_split = false;
    for (const ExtentRec& fe : kept) {
      if (fe.file_off / kFsChunkBytes == (fe.file_off + fe.ext.len - 1) / kFsChunkBytes) {
        split.push_back(fe);
        continue;
      }
      if (fe.ext.len > kMaxSplitBytes) {
        // fs/ never writes such an extent: its length is garbage, and
        // reading it to split it could take the whole device.
        problems.push_back(ExtentName(fe) + " is " + std::to_string(fe.ext.len) +
                           " bytes long, more than a file chunk");
        dropped = true;
        continue;
      }
      bool crc_ok = false;
      auto pieces = SplitAtChunks(fe, v, &crc_ok);
      if (!pieces.ok()) {
        problems.push_back(
            ExtentName(fe) + " crosses a " + std::to_string(kFsChunkBytes) +
            "-byte chunk boundary and cannot be read: " + pieces.status().ToString());
        dropped = true;
        continue;
      }
      problems.push_back(ExtentName(fe) + " crosses a " + std::to_string(kFsChunkBytes) +
                         "-byte chunk boundary" +
                         (crc_ok ? "" : " (and its bytes fail their checksum)"));
      did_split = true;
      split.insert(split.end(), pieces->begin(), pieces->end());
    }
    if (did_split) fixes.push_back("split extents at chunk boundaries");
    kept.clear();
    uint64_t prev_end = 0;
    for (const ExtentRec& fe : split) {
      if (!kept.empty() && fe.file_off < prev_end) {
        problems.push_back(ExtentName(fe) + " overlaps the previous extent in the file");
        dropped = true;
        continue;
      }
      kept.push_back(fe);
      prev_end = fe.file_off + fe.ext.len;
    }
    if (!kept.empty() && prev_end > AlignUp(r.size, kBlockSize)) {
      problems.push_back("extents reach file offset " + std::to_string(prev_end) +
                         ", past the size " + std::to_string(r.size));
      fixes.push_back("grow the size to " + std::to_string(prev_end));
      r.size = prev_end;
    }
    if (problems.empty()) continue;
    if (dropped) fixes.insert(fixes.begin(), "drop the bad extents (those bytes read as zeros)");
    Finding f;
    f.kind = FindingKind::kBadExtent;
    f.ino = r.ino;
    f.path = m.PathOf(i);
    f.problem = Join(problems);
    m.SetExtents(i, std::move(kept));
    auto to = m.MoveToLostFound(i);
    if (to.ok()) {
      fixes.push_back("move the file to " + *to);
      f.fix = Join(fixes);
    } else {
      f.problem += "; " + to.status().context();
    }
    out->push_back(std::move(f));
  }
}

ExtentMap FindSharedBlocks(const Model& m) {
  ExtentMap map;
  for (uint32_t i = 0; i < m.inodes.size(); ++i) {
    const InodeRec& r = m.inodes[i];
    if ((r.flags & kReclaim) || !r.is_reg()) continue;
    auto add = [&](const ExtentRec& fe, uint32_t slot) {
      map.spans.push_back(Span{fe.ext.device, fe.ext.byte_off, fe.ext.byte_off + fe.ext.len, i,
                               slot, fe.crc32c, fe.file_off});
      map.bytes += fe.ext.len;
    };
    if (m.HasNewExtents(i)) {
      std::vector<ExtentRec> list = m.FinalExtents(i);
      for (uint32_t s = 0; s < list.size(); ++s) add(list[s], s);
    } else {
      for (uint32_t s = 0; s < r.ext_count; ++s) add(m.extents[r.ext_begin + s], s);
    }
  }
  std::sort(map.spans.begin(), map.spans.end(), [](const Span& a, const Span& b) {
    if (a.device != b.device) return a.device < b.device;
    if (a.off != b.off) return a.off < b.off;
    return a.end < b.end;
  });
  map.shared.assign(map.spans.size(), false);
  for (size_t i = 0; i < map.spans.size();) {
    size_t j = i + 1;
    uint64_t end = map.spans[i].end;
    while (j < map.spans.size() && map.spans[j].device == map.spans[i].device &&
           map.spans[j].off < end) {
      end = std::max(end, map.spans[j].end);
      ++j;
    }
    if (j - i > 1) {
      map.clusters.emplace_back(i, j);
      for (size_t k = i; k < j; ++k) map.shared[k] = true;
    }
    i = j;
  }
  return map;
}

void ResolveSharedBlocks(Model& m, const OpenedVolume& v, const ExtentMap& map,
                         std::vector<Finding>* out) {
  if (map.clusters.empty()) return;
  // Free space for the copies: the data regions minus every extent in use
  // (the union, since extents overlap here).
  std::vector<std::unique_ptr<alloc::ExtentAllocator>> allocators;
  for (const device::Superblock& sb : v.superblocks) {
    allocators.push_back(
        std::make_unique<alloc::ExtentAllocator>(sb.device_index, sb.data_start, sb.data_length));
  }
  {
    std::vector<std::vector<Extent>> used(allocators.size());
    for (const Span& s : map.spans) {
      auto& u = used[s.device];
      if (!u.empty() && s.off <= u.back().end()) {
        u.back().len = std::max(u.back().end(), s.end) - u.back().byte_off;
      } else {
        u.push_back(Extent{s.device, s.off, s.end - s.off});
      }
    }
    for (size_t d = 0; d < allocators.size(); ++d) {
      allocators[d]->Rebuild(std::move(used[d])).ignore();  // disjoint and valid by construction
    }
  }

  // New lists of the files involved; a dropped slot gets len 0 until the end.
  std::map<uint32_t, std::vector<ExtentRec>> lists;
  auto list_of = [&](uint32_t inode) -> std::vector<ExtentRec>& {
    auto it = lists.find(inode);
    if (it == lists.end()) it = lists.emplace(inode, m.FinalExtents(inode)).first;
    return it->second;
  };
  for (const auto& [b, e] : map.clusters) {
    struct Member {
      const Span* span;
      bool crc_ok = false;
      AlignedBuffer data;
      std::string read_error;
    };
    std::vector<Member> members;
    for (size_t k = b; k < e; ++k) {
      Member mb;
      mb.span = &map.spans[k];
      auto data = ReadExtent(v, Extent{mb.span->device, mb.span->off, mb.span->end - mb.span->off});
      if (data.ok()) {
        mb.crc_ok = Crc32c(data->get(), mb.span->end - mb.span->off) == mb.span->crc32c;
        mb.data = std::move(data).value();
      } else {
        mb.read_error = data.status().ToString();
      }
      members.push_back(std::move(mb));
    }
    std::stable_sort(members.begin(), members.end(), [&](const Member& x, const Member& y) {
      const uint64_t xi = m.inodes[x.span->inode].ino, yi = m.inodes[y.span->inode].ino;
      return xi != yi ? xi < yi : x.span->slot < y.span->slot;
    });
    size_t owner = 0;
    bool any_ok = false;
    for (size_t k = 0; k < members.size(); ++k) {
      if (members[k].crc_ok) {
        owner = k;
        any_ok = true;
        break;
      }
    }
    const Span& os = *members[owner].span;
    const std::string owner_name = m.PathOf(os.inode) + " (inode " +
                                   std::to_string(m.inodes[os.inode].ino) + ")";
    for (size_t k = 0; k < members.size(); ++k) {
      Member& mb = members[k];
      const Span& s = *mb.span;
      const Extent ext{s.device, s.off, s.end - s.off};
      Finding f;
      f.kind = FindingKind::kSharedBlocks;
      f.ino = m.inodes[s.inode].ino;
      f.path = m.PathOf(s.inode);
      std::vector<std::string> fixes;
      if (k == owner) {
        if (any_ok) continue;  // the rightful owner keeps its blocks
        f.problem = "extent at file offset " + std::to_string(s.file_off) + " (" + Range(ext) +
                    ") is shared with other files and no owner's checksum matches";
        fixes.push_back("keep the blocks");
      } else {
        f.problem = "extent at file offset " + std::to_string(s.file_off) + " (" + Range(ext) +
                    ") overlaps blocks of " + owner_name;
        if (!mb.read_error.empty()) f.problem += "; cannot be read: " + mb.read_error;
        std::vector<ExtentRec>& list = list_of(s.inode);
        bool copied = false;
        if (mb.data && (mb.crc_ok || !any_ok)) {
          auto got = allocators[s.device]->Allocate(ext.len);
          if (got.ok()) {
            CloneOp op{ext, *got};
            std::vector<ExtentRec> pieces;
            uint64_t pos = 0;
            for (const Extent& d : *got) {
              ExtentRec p;
              p.file_off = s.file_off + pos;
              p.ext = d;
              p.crc32c = got->size() == 1 ? s.crc32c : Crc32c(mb.data.get() + pos, d.len);
              pieces.push_back(p);
              pos += d.len;
            }
            list[s.slot] = pieces[0];
            list.insert(list.end(), pieces.begin() + 1, pieces.end());
            m.clones.push_back(std::move(op));
            fixes.push_back("copy its bytes to free blocks");
            copied = true;
          } else {
            f.problem += "; no free space for a copy";
          }
        }
        if (!copied) {
          if (mb.data && !mb.crc_ok) {
            f.problem += "; its checksum does not match (the blocks hold other data)";
          }
          list[s.slot].ext.len = 0;  // dropped below
          fixes.push_back("drop the extent (file bytes [" + std::to_string(s.file_off) + ", " +
                          std::to_string(s.file_off + ext.len) + ") read as zeros)");
        }
      }
      auto to = m.MoveToLostFound(s.inode);
      if (to.ok()) {
        fixes.push_back("move the file to " + *to);
        f.fix = Join(fixes);
      } else {
        f.problem += "; " + to.status().context();
      }
      out->push_back(std::move(f));
    }
  }
  for (auto& [inode, list] : lists) {
    std::erase_if(list, [](const ExtentRec& fe) { return fe.ext.len == 0; });
    std::sort(list.begin(), list.end(),
              [](const ExtentRec& a, const ExtentRec& b) { return a.file_off < b.file_off; });
    m.SetExtents(inode, std::move(list));
  }
}

}  // namespace kvfs::fsck
