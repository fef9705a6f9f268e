#include "device/block_device.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/format.h"

namespace kvfs::device {

namespace {

// errno of the failed syscall `what` on `path` as a Status.
Status PosixError(const std::string& path, const std::string& what, int err) {
  return Status::Error(err, path + ": " + what);
}

bool Aligned(uint64_t v) { return v % kBlockSize == 0; }

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A kBlockSize-aligned buffer for O_DIRECT I/O.
std::unique_ptr<char, FreeDeleter> AlignedBlock(size_t len) {
  return std::unique_ptr<char, FreeDeleter>(static_cast<char*>(std::aligned_alloc(kBlockSize, len)));
}

}  // namespace

Result<std::unique_ptr<BlockDevice>> BlockDevice::Open(const std::string& path, bool read_only) {
  // stat before open: opening a FIFO could block, a directory fails with
  // EISDIR, and we want one answer (EINVAL) for "not a device".
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return PosixError(path, "cannot open device", errno);
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    return Status::Error(EINVAL, path + ": neither a regular file nor a block device");
  }
  int flags = (read_only ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC;
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    int err = errno;
    // tmpfs and some FUSE filesystems refuse O_DIRECT with EINVAL; say so.
    return PosixError(path, err == EINVAL ? "cannot open with O_DIRECT" : "cannot open device",
                      err);
  }
  // fstat the fd we actually hold: the path may have changed since stat().
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return PosixError(path, "fstat", err);
  }
  uint64_t size = 0;
  bool blk = S_ISBLK(st.st_mode);
  if (blk) {
    if (::ioctl(fd, BLKGETSIZE64, &size) != 0) {
      int err = errno;
      ::close(fd);
      return PosixError(path, "BLKGETSIZE64", err);
    }
    int logical = 0;
    if (::ioctl(fd, BLKSSZGET, &logical) == 0 && static_cast<uint64_t>(logical) > kBlockSize) {
      ::close(fd);
      return Status::Error(EINVAL, path + ": logical block size " + std::to_string(logical) +
                                       " is larger than " + std::to_string(kBlockSize));
    }
  } else if (S_ISREG(st.st_mode)) {
    size = static_cast<uint64_t>(st.st_size);
  } else {
    ::close(fd);
    return Status::Error(EINVAL, path + ": neither a regular file nor a block device");
  }
  if (!Aligned(size)) {
    ::close(fd);
    return Status::Error(EINVAL, path + ": size " + std::to_string(size) +
                                     " is not a multiple of " + std::to_string(kBlockSize));
  }
  return std::unique_ptr<BlockDevice>(new BlockDevice(fd, path, size, blk, read_only));
}

BlockDevice::~BlockDevice() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // drops the volume lock
  if (fd_ >= 0) ::close(fd_);
}

namespace {

Status Lock(int fd, const std::string& path, int op) {
  while (::flock(fd, op | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return Status::Error(EBUSY, path + ": volume is in use (locked by another process, "
                                         "e.g. mounted or being checked)");
    }
    return PosixError(path, "flock", errno);
  }
  return Status::OK();
}

}  // namespace

Status BlockDevice::LockExclusive() {
  if (lock_fd_ < 0) lock_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock_fd_ < 0) return PosixError(path_, "open for locking", errno);
  return Lock(lock_fd_, path_, LOCK_EX);
}
Status BlockDevice::LockShared() {
  if (lock_fd_ < 0) lock_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock_fd_ < 0) return PosixError(path_, "open for locking", errno);
  return Lock(lock_fd_, path_, LOCK_SH);
}

Status BlockDevice::ReadAt(uint64_t byte_off, void* buf, size_t len) const {
  if (!Aligned(byte_off) || !Aligned(len) || !Aligned(reinterpret_cast<uintptr_t>(buf))) {
    return Status::Error(EINVAL, path_ + ": unaligned read at byte_off " +
                                     std::to_string(byte_off) + " len " + std::to_string(len));
  }
  auto* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd_, p + done, len - done, static_cast<off_t>(byte_off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(path_, "read at byte_off " + std::to_string(byte_off + done), errno);
    }
    if (n == 0) {
      return Status::Error(EIO, path_ + ": read at byte_off " + std::to_string(byte_off + done) +
                                    " hit the end of the device");
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

Status BlockDevice::WriteAt(uint64_t byte_off, const void* buf, size_t len) const {
  if (read_only_) return Status::Error(EROFS, path_ + ": device is open read-only");
  if (!Aligned(byte_off) || !Aligned(len) || !Aligned(reinterpret_cast<uintptr_t>(buf))) {
    return Status::Error(EINVAL, path_ + ": unaligned write at byte_off " +
                                     std::to_string(byte_off) + " len " + std::to_string(len));
  }
  auto* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pwrite(fd_, p + done, len - done, static_cast<off_t>(byte_off + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(path_, "write at byte_off " + std::to_string(byte_off + done), errno);
    }
    if (n == 0) {
      return Status::Error(EIO, path_ + ": write at byte_off " + std::to_string(byte_off + done) +
                                    " made no progress");
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

Status BlockDevice::Sync() const {
  if (::fdatasync(fd_) != 0) return PosixError(path_, "fdatasync", errno);
  return Status::OK();
}

Result<Superblock> BlockDevice::ReadSuperblock() const {
  if (size_bytes_ < kSuperblockSize) {
    return Status::Error(EINVAL, path_ + ": not a kvfs device (too small for a superblock)");
  }
  auto buf = AlignedBlock(kSuperblockSize);
  if (!buf) return Status::Error(ENOMEM, path_ + ": superblock buffer");
  KVFS_RETURN_IF_ERROR(ReadAt(0, buf.get(), kSuperblockSize));
  KVFS_ASSIGN_OR_RETURN(Superblock sb,
                        Superblock::Decode(std::string_view(buf.get(), kSuperblockSize), path_));
  if (sb.data_start + sb.data_length > size_bytes_) {
    return Status::Error(EINVAL, path_ + ": data region [" + std::to_string(sb.data_start) +
                                     ", " + std::to_string(sb.data_start + sb.data_length) +
                                     ") extends past the end of the device (" +
                                     std::to_string(size_bytes_) + " bytes)");
  }
  return sb;
}

Status BlockDevice::WriteSuperblock(const Superblock& sb) const {
  std::string block = sb.Encode();
  auto buf = AlignedBlock(kSuperblockSize);
  if (!buf) return Status::Error(ENOMEM, path_ + ": superblock buffer");
  std::memcpy(buf.get(), block.data(), kSuperblockSize);
  KVFS_RETURN_IF_ERROR(WriteAt(0, buf.get(), kSuperblockSize));
  return Sync();
}

}  // namespace kvfs::device
