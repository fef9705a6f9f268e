#include "fsck/volume_access.h"

#include <cstdlib>
#include <map>

#include "common/format.h"
#include "volume/volume_parts.h"

namespace kvfs::fsck {

namespace {

// Superblock::Decode and ReadSuperblock report a block that is not a valid
// superblock with EINVAL or EUCLEAN; anything else (EIO, ...) is a failure
// to read it.
bool IsDamage(const Status& st) { return st.code() == EINVAL || st.code() == EUCLEAN; }

Finding SuperblockFinding(const std::string& path, const Status& st) {
  Finding f;
  f.kind = FindingKind::kSuperblock;
  f.path = path;
  std::string msg = st.context();
  // Decode's messages start with the device name; it is in `path` already.
  if (msg.rfind(path + ": ", 0) == 0) msg = msg.substr(path.size() + 2);
  f.problem = "damaged superblock: " + msg +
              "; the volume cannot be checked or mounted (restore the device or reformat)";
  return f;
}

}  // namespace

Result<std::unique_ptr<OpenedVolume>> OpenForCheck(const OpenOptions& options,
                                                   std::vector<Finding>* findings) {
  if (options.devices.empty()) return Status::Error(EINVAL, "no device given");
  auto v = std::make_unique<OpenedVolume>();

  std::map<uint32_t, std::pair<std::unique_ptr<device::BlockDevice>, device::Superblock>> by_index;
  bool damaged = false;
  for (const std::string& path : options.devices) {
    KVFS_ASSIGN_OR_RETURN(auto dev, device::BlockDevice::Open(path, !options.repair));
    if (options.repair) {
      Status st = dev->LockExclusive();
      if (!st.ok()) {
        if (st.code() != EBUSY) return st;
        return Status::Error(EBUSY, path +
                                        ": the volume is in use (mounted, or being checked); "
                                        "unmount it before repairing, or check it read-only "
                                        "with -n");
      }
    } else {
      Status st = dev->LockShared();
      if (st.code() == EBUSY) {
        v->mounted = true;
      } else if (!st.ok()) {
        return st;
      }
    }
    auto sb = dev->ReadSuperblock();
    if (!sb.ok()) {
      if (!IsDamage(sb.status())) return sb.status().Annotate("reading the superblock");
      findings->push_back(SuperblockFinding(path, sb.status()));
      damaged = true;
      continue;
    }
    if (by_index.count(sb->device_index)) {
      return Status::Error(EINVAL, path + ": same device index " +
                                       std::to_string(sb->device_index) + " as " +
                                       by_index[sb->device_index].first->path() +
                                       " (the same device given twice, or a copy)");
    }
    by_index.emplace(sb->device_index, std::make_pair(std::move(dev), *sb));
  }
  if (damaged) {
    return Status::Error(EUCLEAN, "damaged superblock; cannot check the volume");
  }
  for (auto& [i, d] : by_index) {
    v->devices.push_back(std::move(d.first));
    v->superblocks.push_back(d.second);
  }

  // The devices must be exactly the devices of one volume, and the index
  // the one they name (volume/volume_parts.h: the checks Volume::Open makes).
  const device::Superblock& first = v->superblocks[0];
  KVFS_RETURN_IF_ERROR(volume::CheckOneVolume(v->devices, v->superblocks));
  KVFS_ASSIGN_OR_RETURN(v->index_dir, volume::IndexDirFor(*v->devices[0], options.index_dir));
  index::Index::Options iopt;
  iopt.block_cache_bytes = options.index_cache_bytes;
  iopt.read_only = !options.repair;
  auto index = volume::OpenIndexOf(v->index_dir, first, v->devices[0]->path(), iopt);
  if (!index.ok()) {
    Status st = index.status();
    if (st.code() == EINVAL) return st;  // foreign, or the device counts differ: says so
    std::string why;
    if (st.code() == ENOENT) {
      why = "the index is missing (give its directory with --index DIR)";
    } else if (st.code() == EBUSY) {
      why = "the index is in use (the volume is mounted?); unmount it before repairing, or "
            "check it read-only with -n";
    } else {
      why = "cannot open the index";
    }
    return st.Annotate("volume " + first.volume_uuid.ToString() + ": " + why);
  }
  v->index = std::move(index).value();
  return v;
}

void FreeDeleter::operator()(char* p) const { std::free(p); }

Result<AlignedBuffer> AllocAligned(size_t len) {
  const size_t n = AlignUp(len == 0 ? 1 : len, kBlockSize);
  AlignedBuffer b(static_cast<char*>(std::aligned_alloc(kBlockSize, n)));
  if (!b) return Status::Error(ENOMEM, "buffer of " + std::to_string(n) + " bytes");
  return b;
}

Result<AlignedBuffer> ReadExtent(const OpenedVolume& v, const Extent& e) {
  if (e.device >= v.devices.size()) {
    return Status::Error(EINVAL, "extent on device " + std::to_string(e.device) +
                                     " of a volume with " + std::to_string(v.devices.size()));
  }
  KVFS_ASSIGN_OR_RETURN(AlignedBuffer b, AllocAligned(e.len));
  KVFS_RETURN_IF_ERROR(v.devices[e.device]->ReadAt(e.byte_off, b.get(), e.len));
  return b;
}

}  // namespace kvfs::fsck
