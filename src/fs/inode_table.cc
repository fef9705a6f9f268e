#include "fs/inode_table.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/format.h"

namespace kvfs::fs {

InodeTable::InodeTable(LoadFn load, UnloadFn on_unload)
    : load_(std::move(load)), on_unload_(std::move(on_unload)) {}

InodeTable::~InodeTable() {
  MutexLock l(mu_);
  inodes_.clear();
}

InodeRef InodeTable::Make(index::Inode rec) {
  auto state = std::make_shared<InodeState>(std::move(rec), next_token_++);
  state->durable_nlink = state->rec.nlink;
  return state;
}

Result<InodeRef> InodeTable::Load(uint64_t ino) {
  // Not in memory, so nothing about it is pending: the index is current.
  KVFS_ASSIGN_OR_RETURN(index::Inode rec, load_(ino));
  std::vector<index::FileExtent> extents = std::move(rec.extents);
  rec.extents.clear();
  InodeRef state = Make(std::move(rec));
  state->durable_size = state->rec.size;  // the record is the index's
  MutexLock l(state->mu());  // no one else sees it yet
  if (!state->data.Load(extents, state->rec.size)) {
    for (const index::FileExtent& fe : extents) {
      if (fe.file_off + fe.ext.len > (fe.file_off / kChunkBytes + 1) * kChunkBytes) {
        return Status::Error(EUCLEAN, "inode " + std::to_string(ino) + ": extent at file offset " +
                                          std::to_string(fe.file_off) +
                                          " crosses a chunk boundary (run fsck.kvfs)");
      }
    }
  }
  return state;
}

Result<InodeRef> InodeTable::Get(uint64_t ino) {
  {
    MutexLock l(mu_);
    auto it = inodes_.find(ino);
    if (it != inodes_.end()) return it->second;
  }
  KVFS_ASSIGN_OR_RETURN(InodeRef state, Load(ino));
  MutexLock l(mu_);
  auto [it, inserted] = inodes_.emplace(ino, state);
  return it->second;  // another thread may have loaded it first: use theirs
}

Result<InodePin> InodeTable::GetPinned(uint64_t ino) {
  for (;;) {
    KVFS_ASSIGN_OR_RETURN(InodeRef i, Get(ino));
    MutexLock l(mu_);
    auto it = inodes_.find(ino);
    if (it == inodes_.end() || it->second != i) continue;  // unloaded meanwhile: reload
    i->pins++;
    return InodePin(this, std::move(i));
  }
}

Result<InodeRef> InodeTable::GetLookedUp(uint64_t ino) {
  for (;;) {
    KVFS_ASSIGN_OR_RETURN(InodeRef i, Get(ino));
    MutexLock l(mu_);
    auto it = inodes_.find(ino);
    if (it == inodes_.end() || it->second != i) continue;
    i->lookups++;
    return i;
  }
}

InodePin InodeTable::Pin(const InodeRef& inode) {
  MutexLock l(mu_);
  inode->pins++;
  return InodePin(this, inode);
}

InodePin InodeTable::PinIfCurrent(const InodeRef& inode) {
  MutexLock l(mu_);
  auto it = inodes_.find(inode->ino);
  if (it == inodes_.end() || it->second != inode) return InodePin();
  inode->pins++;
  return InodePin(this, inode);
}

void InodeTable::Unpin(const InodeRef& inode) {
  MutexLock l(mu_);
  inode->pins--;
  MaybeUnloadLocked(inode);
}

void InodeTable::Forget(uint64_t ino, uint64_t n) {
  MutexLock l(mu_);
  auto it = inodes_.find(ino);
  const uint64_t had = it == inodes_.end() ? 0 : it->second->lookups;
  if (n > had) LookupUnderflow(ino, n, had);
  if (it == inodes_.end()) return;
  InodeRef i = it->second;
  i->lookups = n >= i->lookups ? 0 : i->lookups - n;
  if (ino == kRootIno) i->lookups = std::max<uint64_t>(i->lookups, 1);
  MaybeUnloadLocked(i);
}

void InodeTable::LookupUnderflow(uint64_t ino, uint64_t n, uint64_t had) {
  lookup_underflows_.fetch_add(1, std::memory_order_relaxed);
  spdlog::error("inode {}: the kernel forgot {} lookups of {} kvfs counted (a lookup count bug)",
                ino, n, had);
#ifndef NDEBUG
  // A miscount left running shows up later as an inode dropped while the
  // kernel still uses it, or one that never leaves memory; stop at the
  // cause instead.
  // On stderr too, as a failed assert says its reason.
  spdlog::default_logger()->flush();
  std::fprintf(stderr, "kvfs: lookup count underflow on inode %" PRIu64 ", aborting\n", ino);
  std::abort();
#endif
}

void InodeTable::AddOpen(InodeState& inode) {
  MutexLock l(mu_);
  inode.opens++;
}

bool InodeTable::DropOpen(InodeState& inode) {
  MutexLock l(mu_);
  return --inode.opens == 0;
}

int InodeTable::opens(const InodeState& inode) const {
  MutexLock l(mu_);
  return inode.opens;
}

void InodeTable::Insert(const InodeRef& inode, uint64_t lookups, int opens) {
  MutexLock l(mu_);
  inode->lookups = lookups;
  inode->opens = opens;
  inodes_.emplace(inode->ino, inode);
}

void InodeTable::UnloadIfUnused(const InodeRef& inode) {
  MutexLock l(mu_);
  MaybeUnloadLocked(inode);
}

void InodeTable::MaybeUnloadLocked(const InodeRef& inode) {
  if (inode->lookups != 0 || inode->opens != 0 || inode->pins != 0 || inode->ino == kRootIno) {
    return;
  }
  auto it = inodes_.find(inode->ino);
  if (it != inodes_.end() && it->second == inode) {
    inodes_.erase(it);
    on_unload_(*inode);
  }
}

std::vector<InodeRef> InodeTable::All() const {
  MutexLock l(mu_);
  std::vector<InodeRef> all;
  all.reserve(inodes_.size());
  for (const auto& [ino, i] : inodes_) all.push_back(i);
  return all;
}

size_t InodeTable::size() const {
  MutexLock l(mu_);
  return inodes_.size();
}

}  // namespace kvfs::fs
