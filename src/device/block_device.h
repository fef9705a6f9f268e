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
  // nor a block device or its size is not a multiple of kBlockSize (or the
  // filesystem refuses O_DIRECT, e.g. tmpfs); otherwise open(2)'s errno.
  // Every error's context names the path.
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
  // `buf`, `byte_off` and `len` must be kBlockSize aligned (EINVAL); short
  // transfers are retried, a transfer that hits the end of the device is
  // EIO, a write to a read-only device EROFS.
  Status ReadAt(uint64_t byte_off, void* buf, size_t len) const;
  Status WriteAt(uint64_t byte_off, const void* buf, size_t len) const;
  Status Sync() const;  // fdatasync

  // Superblock::Decode()'s errors (EINVAL, EUCLEAN), and EINVAL if the data
  // region extends past the end of the device.
  Result<Superblock> ReadSuperblock() const;
  Status WriteSuperblock(const Superblock& sb) const;  // and fdatasync

 private:
  BlockDevice(int fd, std::string path, uint64_t size, bool blk, bool ro)
      : fd_(fd), path_(std::move(path)), size_bytes_(size), is_block_device_(blk), read_only_(ro) {}
  int fd_;
  // A second open file description used only for the volume lock. The I/O
  // fd is registered with io_uring, and a killed daemon's rings keep it
  // (and a flock on it) alive until the kernel's asynchronous teardown ends;
  // this one is released the moment its holder dies.
  int lock_fd_ = -1;
  std::string path_;
  uint64_t size_bytes_;
  bool is_block_device_;
  bool read_only_;
};

}  // namespace kvfs::device
