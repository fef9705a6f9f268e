#include "fs/staged_inodes.h"

namespace kvfs::fs {

void StagedInodes::Add(const InodeRef& inode) {
  MutexLock l(mu_);
  inodes_[inode->ino] = inode;
}

std::vector<InodeRef> StagedInodes::Take() {
  std::unordered_map<uint64_t, std::weak_ptr<InodeState>> taken;
  {
    MutexLock l(mu_);
    taken.swap(inodes_);
  }
  std::vector<InodeRef> out;
  for (auto& [ino, weak] : taken) {
    if (InodeRef i = weak.lock()) out.push_back(std::move(i));
  }
  return out;
}

}  // namespace kvfs::fs
