#include "volume/format_volume.h"

#include <blkid/blkid.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <algorithm>
#include <memory>

#include "common/format.h"
#include "device/block_device.h"
#include "device/superblock.h"
#include "index/index.h"
#include "index/records.h"
#include "volume/volume_parts.h"

namespace kvfs::volume {
namespace fs = std::filesystem;

namespace {

struct Planned {
  std::string path;
  bool exists = false;
  bool is_block_device = false;
  uint64_t size_bytes = 0;  // after creating/extending
};

// EEXIST if `path` already holds a kvfs volume or another filesystem,
// partition table or swap signature.
Status CheckNoSignature(const std::string& path) {
  auto dev = device::BlockDevice::Open(path, /*read_only=*/true);
  if (!dev.ok()) return dev.status();
  auto sb = (*dev)->ReadSuperblock();
  if (sb.ok()) {
    return Status::Error(EEXIST, path + " already holds kvfs volume " +
                                     sb->volume_uuid.ToString() + " (use -f to overwrite)");
  }
  blkid_probe pr = blkid_new_probe_from_filename(path.c_str());
  if (pr == nullptr) return Status::Error(EIO, path + ": cannot probe for signatures");
  blkid_probe_enable_superblocks(pr, 1);
  blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE);
  blkid_probe_enable_partitions(pr, 1);
  int rc = blkid_do_safeprobe(pr);
  std::string what;
  const char* type = nullptr;
  if (rc == 0) {
    if (blkid_probe_lookup_value(pr, "TYPE", &type, nullptr) == 0 && type) what = type;
    else if (blkid_probe_lookup_value(pr, "PTTYPE", &type, nullptr) == 0 && type)
      what = std::string(type) + " partition table";
    else what = "a signature";
  } else if (rc == -2) {
    what = "several signatures";
  }
  blkid_free_probe(pr);
  if (!what.empty()) {
    return Status::Error(EEXIST, path + " holds " + what + " (use -f to overwrite)");
  }
  return Status::OK();
}

Status CheckIndexDir(const std::string& dir, bool force) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) return Status::Error(ENOTDIR, "index " + dir + ": not a directory");
    if (fs::exists(fs::path(dir) / "CURRENT", ec)) {
      if (!force) {
        return Status::Error(EEXIST, "index " + dir + " already holds an index (use -f to replace)");
      }
      // RocksDB holds a write lock (fcntl) on LOCK while the index is open:
      // the index of a mounted volume is never replaced, whatever devices
      // were named.
      int fd = open((fs::path(dir) / "LOCK").c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        struct flock fl {};
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        const bool held = fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
        close(fd);
        if (held) {
          return Status::Error(EBUSY, "index " + dir + " is in use (open by a kvfs mount or fsck)");
        }
      }
    } else if (!fs::is_empty(dir, ec)) {
      return Status::Error(ENOTEMPTY, "index " + dir + ": directory is not empty and is not an index");
    }
    if (access(dir.c_str(), W_OK) != 0) return Status::FromErrno("index " + dir);
    return Status::OK();
  }
  // Find the nearest existing ancestor; it must be a writable directory.
  fs::path p = fs::absolute(dir, ec).parent_path();
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  if (access(p.c_str(), W_OK) != 0) return Status::FromErrno("index " + dir + ": " + p.string());
  return Status::OK();
}

}  // namespace

Result<FormatResult> FormatVolume(const std::vector<std::string>& devices,
                                  const FormatOptions& options) {
  if (devices.empty()) return Status::Error(EINVAL, "no device given");
  if (options.size_bytes % kBlockSize != 0) {
    return Status::Error(EINVAL, "size " + std::to_string(options.size_bytes) +
                                     " is not a multiple of " + std::to_string(kBlockSize));
  }

  // Phase 1: check everything, write nothing.
  std::vector<Planned> plan;
  std::vector<std::unique_ptr<device::BlockDevice>> locked;  // held until the end
  std::vector<std::string> seen;
  for (const std::string& path : devices) {
    Planned p;
    p.path = path;
    std::error_code canon_ec;
    std::string canon = fs::weakly_canonical(path, canon_ec).string();
    if (canon_ec) canon = path;
    if (std::find(seen.begin(), seen.end(), canon) != seen.end()) {
      return Status::Error(EINVAL, path + ": named twice");
    }
    seen.push_back(canon);
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      if (errno != ENOENT) return Status::FromErrno(path);
      if (options.size_bytes == 0) {
        return Status::Error(ENOENT, path + ": no such file (give --size to create an image file)");
      }
      p.size_bytes = options.size_bytes;
    } else {
      p.exists = true;
      p.is_block_device = S_ISBLK(st.st_mode);
      if (!S_ISREG(st.st_mode) && !p.is_block_device) {
        return Status::Error(EINVAL, path + ": neither a regular file nor a block device");
      }
      auto dev = device::BlockDevice::Open(path, /*read_only=*/true);
      if (!dev.ok()) return dev.status();
      // A mounted (or checked) volume holds its devices' lock: refused even
      // with --force, and held until the end, so no mount starts meanwhile.
      KVFS_RETURN_IF_ERROR((*dev)->LockExclusive());
      if (p.is_block_device) {
        // Mounted by a kernel filesystem (or held by md/dm): the kernel's
        // exclusive claim makes an O_EXCL open fail with EBUSY.
        int fd = open(path.c_str(), O_RDONLY | O_EXCL | O_CLOEXEC);
        if (fd < 0 && errno == EBUSY) {
          return Status::Error(EBUSY, path + ": in use by the kernel (mounted?); not formatting it");
        }
        if (fd >= 0) close(fd);
      }
      p.size_bytes = (*dev)->size_bytes();
      locked.push_back(std::move(*dev));
      if (options.size_bytes > 0) {
        if (p.is_block_device) return Status::Error(EINVAL, path + ": --size is for image files");
        if (options.size_bytes < p.size_bytes) {
          return Status::Error(EINVAL, path + " is already larger than --size (not shrinking it)");
        }
        p.size_bytes = options.size_bytes;
      }
      if (!options.force) KVFS_RETURN_IF_ERROR(CheckNoSignature(path));
    }
    if (p.size_bytes % kBlockSize != 0) {
      return Status::Error(EINVAL, path + ": size " + std::to_string(p.size_bytes) +
                                       " is not a multiple of " + std::to_string(kBlockSize));
    }
    if (p.size_bytes < kMinDeviceBytes) {
      return Status::Error(EINVAL, path + ": " + std::to_string(p.size_bytes) +
                                       " bytes is too small (kvfs needs at least " +
                                       std::to_string(kMinDeviceBytes) + ")");
    }
    plan.push_back(p);
  }
  std::string index_dir = options.index_dir;
  if (index_dir.empty()) {
    if (plan[0].is_block_device) {
      return Status::Error(EINVAL, plan[0].path + ": --index DIR is required for a block device");
    }
    index_dir = plan[0].path + ".index";
  }
  KVFS_RETURN_IF_ERROR(CheckIndexDir(index_dir, options.force));

  // Phase 2: the index, the image files, then the superblocks that name the index.
  FormatResult result;
  result.volume_uuid = Uuid::Random();
  result.index_uuid = Uuid::Random();
  result.index_dir = index_dir;
  std::error_code ec;
  if (options.force && fs::exists(fs::path(index_dir) / "CURRENT", ec)) {
    fs::remove_all(index_dir, ec);
    if (ec) return Status::Error(ec.value(), "index " + index_dir + ": removing old index");
  }
  index::VolumeRecord rec;
  rec.format_version = kFormatVersion;
  rec.volume_uuid = result.volume_uuid;
  rec.index_uuid = result.index_uuid;
  rec.device_count = static_cast<uint32_t>(plan.size());
  {
    KVFS_ASSIGN_OR_RETURN(auto index,
                          index::Index::Create(index_dir, rec, options.root_uid, options.root_gid));
  }
  // Then create or extend image files; if that fails, the new index goes.
  for (const Planned& p : plan) {
    if (p.is_block_device) continue;
    int fd = open(p.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      Status st = Status::FromErrno(p.path);
      fs::remove_all(index_dir, ec);
      return st;
    }
    int rc = 0;
    struct stat st;
    if (fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) < p.size_bytes) {
      rc = posix_fallocate(fd, 0, static_cast<off_t>(p.size_bytes));
    }
    close(fd);
    if (rc != 0) {
      fs::remove_all(index_dir, ec);
      return Status::Error(rc, p.path + ": allocating " + std::to_string(p.size_bytes) + " bytes");
    }
  }

  for (size_t i = 0; i < plan.size(); ++i) {
    KVFS_ASSIGN_OR_RETURN(auto dev, device::BlockDevice::Open(plan[i].path, /*read_only=*/false));
    device::Superblock sb;
    sb.format_version = kFormatVersion;
    sb.volume_uuid = result.volume_uuid;
    sb.index_uuid = result.index_uuid;
    sb.device_index = static_cast<uint32_t>(i);
    sb.device_count = static_cast<uint32_t>(plan.size());
    sb.block_size = kBlockSize;
    sb.data_start = kDataStart;
    sb.data_length = AlignDown(dev->size_bytes() - kDataStart, kBlockSize);
    result.data_bytes += sb.data_length;
    KVFS_RETURN_IF_ERROR(dev->WriteSuperblock(sb));
  }
  return result;
}

Result<AddResult> AddDevice(const std::vector<std::string>& devices, const std::string& new_device,
                            const FormatOptions& options) {
  if (devices.empty()) return Status::Error(EINVAL, "--add: no device of the volume given");
  // The volume as it is, locked (a mounted volume holds the lock: EBUSY).
  std::vector<std::unique_ptr<device::BlockDevice>> devs(devices.size());
  std::vector<device::Superblock> sbs(devices.size());
  for (const std::string& path : devices) {
    KVFS_ASSIGN_OR_RETURN(auto dev, device::BlockDevice::Open(path, /*read_only=*/false));
    KVFS_RETURN_IF_ERROR(dev->LockExclusive());
    KVFS_ASSIGN_OR_RETURN(auto sb, dev->ReadSuperblock());
    if (sb.device_index >= devs.size() || devs[sb.device_index] != nullptr) {
      return Status::Error(EINVAL, path + ": device " + std::to_string(sb.device_index) +
                                       " of " + std::to_string(sb.device_count) +
                                       "; give every device of the volume once");
    }
    devs[sb.device_index] = std::move(dev);
    sbs[sb.device_index] = sb;
  }
  KVFS_RETURN_IF_ERROR(CheckOneVolume(devs, sbs));
  const uint32_t n = static_cast<uint32_t>(devs.size());
  KVFS_ASSIGN_OR_RETURN(std::string index_dir, IndexDirFor(*devs[0], options.index_dir));
  KVFS_ASSIGN_OR_RETURN(auto index, index::Index::Open(index_dir, index::Index::Options{}));
  index::VolumeRecord rec = index->volume();
  if (rec.volume_uuid != sbs[0].volume_uuid || rec.index_uuid != sbs[0].index_uuid) {
    return Status::Error(EINVAL, "foreign index: " + index_dir + " is not the index of " +
                                     devs[0]->path());
  }
  if (rec.device_count != n && rec.device_count != n + 1) {  // n + 1: an --add cut short
    return Status::Error(EINVAL, "index " + index_dir + " records " +
                                     std::to_string(rec.device_count) + " devices, the superblocks " +
                                     std::to_string(n));
  }

  // The new device: checked, then created or extended.
  for (const auto& d : devs) {
    std::error_code ec;
    if (fs::equivalent(d->path(), new_device, ec)) {
      return Status::Error(EINVAL, new_device + " is already a device of the volume");
    }
  }
  struct stat st;
  bool exists = stat(new_device.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) return Status::FromErrno(new_device);
  if (!exists && options.size_bytes == 0) {
    return Status::Error(ENOENT, new_device + ": no such file (give --size to create an image file)");
  }
  if (exists && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    return Status::Error(EINVAL, new_device + ": neither a regular file nor a block device");
  }
  if (exists && !options.force) KVFS_RETURN_IF_ERROR(CheckNoSignature(new_device));
  if (options.size_bytes % kBlockSize != 0) {
    return Status::Error(EINVAL, "size " + std::to_string(options.size_bytes) +
                                     " is not a multiple of " + std::to_string(kBlockSize));
  }
  if (!exists || (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) < options.size_bytes)) {
    int fd = open(new_device.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return Status::FromErrno(new_device);
    int rc = posix_fallocate(fd, 0, static_cast<off_t>(options.size_bytes));
    close(fd);
    if (rc != 0) {
      return Status::Error(rc, new_device + ": allocating " + std::to_string(options.size_bytes) +
                                   " bytes");
    }
  }
  KVFS_ASSIGN_OR_RETURN(auto added, device::BlockDevice::Open(new_device, /*read_only=*/false));
  KVFS_RETURN_IF_ERROR(added->LockExclusive());
  if (added->size_bytes() < kMinDeviceBytes) {
    return Status::Error(EINVAL, new_device + ": " + std::to_string(added->size_bytes()) +
                                     " bytes is too small (kvfs needs at least " +
                                     std::to_string(kMinDeviceBytes) + ")");
  }

  device::Superblock sb = sbs[0];
  sb.device_index = n;
  sb.device_count = n + 1;
  sb.data_start = kDataStart;
  sb.data_length = AlignDown(added->size_bytes() - kDataStart, kBlockSize);
  KVFS_RETURN_IF_ERROR(added->WriteSuperblock(sb));
  if (rec.device_count != n + 1) {
    rec.device_count = n + 1;
    KVFS_RETURN_IF_ERROR(index->SetVolume(rec));
  }
  for (uint32_t i = 0; i < n; ++i) {
    device::Superblock old = sbs[i];
    old.device_count = n + 1;
    KVFS_RETURN_IF_ERROR(devs[i]->WriteSuperblock(old));
  }
  return AddResult{n, sb.data_length};
}

}  // namespace kvfs::volume
