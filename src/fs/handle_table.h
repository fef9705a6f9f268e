// HandleTable: open file and directory handles by number.
//
// A file handle holds a reference to its InodeState (the inode's open count
// is kept by the InodeTable, not here) and the open flags; a directory
// handle holds the listing taken when it is read from offset 0. Handle numbers are non-zero,
// never reused, and shared by both kinds.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <fcntl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "fs/inode_table.h"

namespace kvfs::fs {

class FileMemory;

struct Handle {
  InodeRef inode;
  int flags = 0;
  // Served by the kernel from this file memory (FileSystem::OpenServed).
  std::shared_ptr<FileMemory> memory;
  bool writable() const { return (flags & O_ACCMODE) != O_RDONLY; }
};

struct DirHandle {
  uint64_t ino = 0;
  struct Item {
    std::string name;
    uint64_t ino;
    uint32_t mode;
  };
  std::mutex mu;  // one ReadDir of the handle at a time
  // Snapshot taken at the last ReadDir from offset 0 (rewinddir(3): POSIX
  // wants entries made since opendir to show). GUARDED_BY(mu)
  std::vector<Item> items;
  bool listed = false;  // items holds a listing; GUARDED_BY(mu)
};

class HandleTable {
 public:
  uint64_t Add(Handle h) {
    const uint64_t fh = next_fh_++;
    MutexLock l(mu_);
    files_.emplace(fh, std::move(h));
    return fh;
  }
  // A copy of handle `fh`, or nullopt (the caller answers EBADF).
  std::optional<Handle> Get(uint64_t fh) const {
    MutexLock l(mu_);
    auto it = files_.find(fh);
    if (it == files_.end()) return std::nullopt;
    return it->second;
  }
  // Removes handle `fh` and returns it, or nullopt.
  std::optional<Handle> Take(uint64_t fh) {
    MutexLock l(mu_);
    auto it = files_.find(fh);
    if (it == files_.end()) return std::nullopt;
    Handle h = std::move(it->second);
    files_.erase(it);
    return h;
  }

  uint64_t AddDir(std::unique_ptr<DirHandle> d) {
    const uint64_t fh = next_fh_++;
    MutexLock l(mu_);
    dirs_.emplace(fh, std::move(d));
    return fh;
  }
  // The directory handle `dh`, or null. Stays valid until ReleaseDir(dh):
  // the kernel sends no READDIR of a handle after its RELEASEDIR.
  DirHandle* GetDir(uint64_t dh) const {
    MutexLock l(mu_);
    auto it = dirs_.find(dh);
    return it == dirs_.end() ? nullptr : it->second.get();
  }
  void ReleaseDir(uint64_t dh) {
    std::unique_ptr<DirHandle> gone;  // freed outside the lock
    MutexLock l(mu_);
    auto it = dirs_.find(dh);
    if (it == dirs_.end()) return;
    gone = std::move(it->second);
    dirs_.erase(it);
  }

 private:
  std::atomic<uint64_t> next_fh_{1};
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Handle> files_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, std::unique_ptr<DirHandle>> dirs_ GUARDED_BY(mu_);
};

}  // namespace kvfs::fs
