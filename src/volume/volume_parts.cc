#include "volume/volume_parts.h"

namespace kvfs::volume {

Result<std::string> IndexDirFor(const device::BlockDevice& first, const std::string& given) {
  if (!given.empty()) return given;
  if (first.is_block_device()) {
    return Status::Error(EINVAL, first.path() +
                                     ": an index directory is required for a block device "
                                     "(-o index=DIR / --index DIR)");
  }
  return first.path() + ".index";
}

Status CheckOneVolume(const std::vector<std::unique_ptr<device::BlockDevice>>& devices,
                      const std::vector<device::Superblock>& sbs) {
  const device::Superblock& first = sbs[0];
  for (size_t i = 0; i < sbs.size(); ++i) {
    const device::Superblock& sb = sbs[i];
    const std::string& path = devices[i]->path();
    if (sb.volume_uuid != first.volume_uuid || sb.index_uuid != first.index_uuid) {
      return Status::Error(EINVAL, path + " belongs to volume " + sb.volume_uuid.ToString() +
                                       ", " + devices[0]->path() + " to volume " +
                                       first.volume_uuid.ToString() +
                                       ": give the devices of one volume");
    }
    if (sb.device_count != sbs.size() || sb.device_index != i) {
      // Name what is missing (by device index: a superblock records no
      // paths) and what was given, so the operator can find the one absent.
      std::string missing, given;
      for (uint32_t d = 0; d < first.device_count; ++d) {
        bool found = false;
        for (const auto& other : sbs) found = found || other.device_index == d;
        if (!found) missing += (missing.empty() ? "" : ", ") + std::to_string(d);
      }
      for (size_t j = 0; j < sbs.size(); ++j) {
        given += (j ? ", " : "") + devices[j]->path() + " is device " +
                 std::to_string(sbs[j].device_index);
      }
      return Status::Error(EINVAL, "volume " + first.volume_uuid.ToString() + " has " +
                                       std::to_string(first.device_count) + " devices; " +
                                       std::to_string(sbs.size()) + " given (" + given +
                                       "): device " + (missing.empty() ? "?" : missing) +
                                       " missing; give all of its devices");
    }
    if (sb.data_start + sb.data_length > devices[i]->size_bytes()) {
      return Status::Error(EINVAL, path + ": data region ends at " +
                                       std::to_string(sb.data_start + sb.data_length) +
                                       " but the device has only " +
                                       std::to_string(devices[i]->size_bytes()) + " bytes");
    }
  }
  return Status::OK();
}

Result<std::unique_ptr<index::Index>> OpenIndexOf(const std::string& dir,
                                                  const device::Superblock& sb0,
                                                  const std::string& first_path,
                                                  const index::Index::Options& options) {
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<index::Index> index, index::Index::Open(dir, options));
  const index::VolumeRecord& rec = index->volume();
  if (rec.volume_uuid != sb0.volume_uuid || rec.index_uuid != sb0.index_uuid) {
    return Status::Error(EINVAL, "foreign index: " + dir + " belongs to volume " +
                                     rec.volume_uuid.ToString() + " (index " +
                                     rec.index_uuid.ToString() + "), but " + first_path +
                                     " belongs to volume " + sb0.volume_uuid.ToString() +
                                     " (index " + sb0.index_uuid.ToString() + ")");
  }
  if (rec.device_count != sb0.device_count) {
    return Status::Error(EINVAL, "index " + dir + " records " + std::to_string(rec.device_count) +
                                     " device(s), the superblocks " +
                                     std::to_string(sb0.device_count));
  }
  return index;
}

}  // namespace kvfs::volume
