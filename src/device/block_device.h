// An open device of a volume: a block device or a preallocated regular file,
// opened O_RDWR|O_DIRECT (O_RDONLY|O_DIRECT when read-only). All I/O on it is
// kBlockSize aligned. Owns the fd.
//
// Thread safety: the accessors are const and safe from any thread; the
// synchronous helpers use pread/pwrite and are safe concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "device/superblock.h"

namespace kvfs::device {

class BlockDevice {
 public:
  // Opens `path`. ENOENT if missing, EINVAL if it is neither a regular file
  // nor a block device or its size is not a multiple of kBlockSize.
  static Result<std::unique_ptr<BlockDevice>> Open(const std::string& path, bool read_only);
  ~BlockDevice();
  BlockDevice(const BlockDevice&) = delete;
  BlockDevice& operator=(const BlockDevice&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t size_bytes() const { return size_bytes_; }
  bool is_block_device() const { return is_block_device_; }
  bool read_only() const { return read_only_; }

  // Takes an exclusive advisory lock (flock) on the device so a second mount
  // or a repairing fsck is refused. EBUSY with a clear message if held.
  Status LockExclusive();
  // Shared lock: fails with EBUSY while an exclusive holder exists.
  Status LockShared();

  // Synchronous aligned I/O for tools and setup (not the data path).
  // `buf` must be kBlockSize aligned; short transfers are retried.
  Status ReadAt(uint64_t byte_off, void* buf, size_t len) const;
  Status WriteAt(uint64_t byte_off, const void* buf, size_t len) const;
  Status Sync() const;  // fdatasync

  Result<Superblock> ReadSuperblock() const;
  Status WriteSuperblock(const Superblock& sb) const;  // and fdatasync

 private:
  BlockDevice(int fd, std::string path, uint64_t size, bool blk, bool ro)
      : fd_(fd), path_(std::move(path)), size_bytes_(size), is_block_device_(blk), read_only_(ro) {}
  int fd_;
  std::string path_;
  uint64_t size_bytes_;
  bool is_block_device_;
  bool read_only_;
};

}  // namespace kvfs::device
