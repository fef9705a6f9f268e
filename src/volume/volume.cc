#include "volume/volume.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "common/format.h"
#include "common/kill_point.h"
#include "volume/volume_parts.h"

namespace kvfs::volume {

Result<std::string> DefaultIndexDir(const std::string& first_device) {
  KVFS_ASSIGN_OR_RETURN(auto dev, device::BlockDevice::Open(first_device, /*read_only=*/true));
  return IndexDirFor(*dev, "");
}

Result<std::unique_ptr<Volume>> Volume::Open(const std::vector<std::string>& device_paths,
                                             const VolumeOptions& options) {
  if (device_paths.empty()) return Status::Error(EINVAL, "no device given");
  std::unique_ptr<Volume> v(new Volume());
  v->read_only_ = options.read_only;

  // Devices, ordered by the index their superblock records.
  std::map<uint32_t, std::pair<std::unique_ptr<device::BlockDevice>, device::Superblock>> by_index;
  for (const std::string& path : device_paths) {
    KVFS_ASSIGN_OR_RETURN(auto dev, device::BlockDevice::Open(path, options.read_only));
    if (!options.read_only) {
      KVFS_RETURN_IF_ERROR(dev->LockExclusive());
    } else if (options.shared_lock) {
      KVFS_RETURN_IF_ERROR(dev->LockShared());
    }
    KVFS_ASSIGN_OR_RETURN(auto sb, dev->ReadSuperblock());
    if (by_index.count(sb.device_index)) {
      return Status::Error(EINVAL, path + ": same device index " +
                                       std::to_string(sb.device_index) + " as " +
                                       by_index[sb.device_index].first->path());
    }
    by_index.emplace(sb.device_index, std::make_pair(std::move(dev), sb));
  }
  for (auto& [i, d] : by_index) {
    v->devices_.push_back(std::move(d.first));
    v->superblocks_.push_back(d.second);
  }
  KVFS_RETURN_IF_ERROR(CheckOneVolume(v->devices_, v->superblocks_));

  // The index, which must be the one the superblocks name.
  KVFS_ASSIGN_OR_RETURN(std::string index_dir, IndexDirFor(*v->devices_[0], options.index_dir));
  index::Index::Options iopt;
  iopt.block_cache_bytes = options.index_cache_bytes;
  iopt.read_only = options.read_only;
  auto index = OpenIndexOf(index_dir, v->superblocks_[0], v->devices_[0]->path(), iopt);
  if (!index.ok()) {
    if (index.status().code() == EINVAL) return index.status();  // foreign: says so itself
    return index.status().Annotate("volume " + v->superblocks_[0].volume_uuid.ToString() +
                                   ": cannot use index " + index_dir);
  }
  v->index_ = std::move(index).value();

  for (const auto& sb : v->superblocks_) {
    v->allocators_.push_back(std::make_unique<alloc::ExtentAllocator>(
        sb.device_index, sb.data_start, sb.data_length));
  }
  if (!options.read_only) KVFS_RETURN_IF_ERROR(v->ReclaimOrphans());
  KVFS_RETURN_IF_ERROR(v->RebuildFreeSpace());
  if (!options.read_only) {
    // Connectors stat storms of names right after a mount: serve them from
    // the index's block cache, not one disk read each.
    Status warm = v->index_->WarmCache(options.index_cache_bytes / 2);
    if (!warm.ok()) spdlog::warn("warming the index cache: {}", warm.ToString());
  }

  std::vector<const device::BlockDevice*> devs;
  for (auto& d : v->devices_) devs.push_back(d.get());
  KVFS_ASSIGN_OR_RETURN(v->engine_, device::IoEngine::Create(devs, options.engine));
  v->io_ = v->engine_.get();
  if (!options.shapes.empty()) {
    v->shaped_ = std::make_unique<device::ShapedIo>(*v->engine_, options.shapes);
    v->io_ = v->shaped_.get();
  }
  if (options.wrap_io) {
    v->wrapper_ = options.wrap_io(*v->io_);
    v->io_ = v->wrapper_.get();
  }
  return v;
}

Volume::~Volume() {
  // Order matters: the wrapper and the engine complete every request
  // (callbacks may touch the index) before the index closes.
  wrapper_.reset();
  shaped_.reset();
  engine_.reset();
  index_.reset();
}

Status Volume::ReclaimOrphans() {
  std::vector<uint64_t> orphans;
  KVFS_RETURN_IF_ERROR(index_->ForEachOrphan([&](uint64_t ino) {
    orphans.push_back(ino);
    return true;
  }));
  if (orphans.empty()) return Status::OK();
  // No handle survives a restart, so an orphan's data is garbage now. Its
  // extents become free because the inode record goes away.
  index::WriteBatch batch = index_->NewBatch();
  for (uint64_t ino : orphans) {
    batch.DeleteInode(ino);
    batch.DeleteOrphan(ino);
  }
  KVFS_KILL_POINT("Volume::ReclaimOrphans:BeforeCommit");  // a crash at mount
  KVFS_RETURN_IF_ERROR(index_->Commit(batch, /*sync=*/true));
  reclaimed_orphans_ = orphans.size();
  spdlog::info("reclaimed {} orphaned file(s) (unlinked while open, or O_TMPFILE never linked)",
               orphans.size());
  return Status::OK();
}

Status Volume::RebuildFreeSpace() {
  std::vector<std::vector<Extent>> used(allocators_.size());
  Status bad;
  KVFS_RETURN_IF_ERROR(index_->ForEachInode([&](const index::Inode& inode) {
    for (const auto& fe : inode.extents) {
      if (fe.ext.device >= used.size()) {
        bad = Status::Error(EUCLEAN, "inode " + std::to_string(inode.ino) +
                                         " has an extent on device " +
                                         std::to_string(fe.ext.device) + " of a volume with " +
                                         std::to_string(used.size()));
        return false;
      }
      used[fe.ext.device].push_back(fe.ext);
    }
    return true;
  }));
  KVFS_RETURN_IF_ERROR(bad);
  for (size_t i = 0; i < allocators_.size(); ++i) {
    Status st = allocators_[i]->Rebuild(std::move(used[i]));
    if (!st.ok()) return st.Annotate(devices_[i]->path() + ": index extents (run fsck.kvfs)");
  }
  return Status::OK();
}

Result<std::vector<Extent>> Volume::Allocate(uint64_t bytes, const PlacementHint& hint) {
  if (read_only_) return Status::Error(EROFS, "volume is open read-only");
  std::vector<uint64_t> free_bytes(allocators_.size()), region(allocators_.size());
  for (size_t i = 0; i < allocators_.size(); ++i) {
    free_bytes[i] = allocators_[i]->free_bytes();
    region[i] = allocators_[i]->region_len();
  }
  Status last = Status::Error(ENOSPC, "no free space");
  for (uint32_t i : PlacementOrder(hint, free_bytes, region)) {
    auto r = allocators_[i]->Allocate(bytes);
    if (r.ok()) return r;
    last = r.status();
  }
  return last;
}

Status Volume::Free(const std::vector<Extent>& extents) {
  Status first;
  for (const Extent& e : extents) {
    Status st = e.device < allocators_.size()
                    ? allocators_[e.device]->Free(e)
                    : Status::Error(EINVAL, "free of extent on unknown device " +
                                                std::to_string(e.device));
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

SpaceStats Volume::space() const {
  SpaceStats s;
  for (const auto& a : allocators_) {
    DeviceSpace d{a->region_len(), a->free_bytes(), a->largest_free()};
    s.total_bytes += d.total_bytes;
    s.free_bytes += d.free_bytes;
    s.largest_free = std::max(s.largest_free, d.largest_free);
    s.free_extents += a->free_extent_count();
    s.devices.push_back(d);
  }
  return s;
}

}  // namespace kvfs::volume
