// InodeTable: the live InodeStates by inode number, and the pins that keep
// one in memory.
//
// An InodeState stays in the table while anything needs it: the kernel's
// lookup count (Lookup, Create, MkDir; Forget), open handles, or a pin. A
// pin is what every other holder takes: a queued change, a chunk write or
// device read in flight, a batch path walk, a retained prefetch. When the
// last of the three counts drops to zero the state leaves the table and
// `on_unload` runs (the RAM cache drops the entries it owns); a later Get()
// loads a fresh copy from the index.
//
// Pins are InodePin objects: move-only, released by their destructor, so a
// pin cannot be dropped twice or forgotten on an error path. A holder that
// must be copyable (a std::function callback) keeps a SharedPin.
//
// Thread safety: every method may be called from any thread. Lock order:
// an InodeState's `mu` may be held when calling into the table (Open counts
// under it); the table's mutex is never held while calling out, except for
// `on_unload`, which must not call back into the table.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "fs/inode_state.h"

namespace kvfs::fs {

using InodeRef = std::shared_ptr<InodeState>;
class InodeTable;

// One pin on an InodeState. Empty when default-constructed or moved from.
class InodePin {
 public:
  InodePin() = default;
  InodePin(InodePin&& o) noexcept : table_(o.table_), inode_(std::move(o.inode_)) {
    o.table_ = nullptr;
  }
  InodePin& operator=(InodePin&& o) noexcept {
    if (this != &o) {
      Reset();
      table_ = o.table_;
      inode_ = std::move(o.inode_);
      o.table_ = nullptr;
    }
    return *this;
  }
  InodePin(const InodePin&) = delete;
  InodePin& operator=(const InodePin&) = delete;
  ~InodePin() { Reset(); }

  // Gives the pin back (the state may leave the table now).
  void Reset();
  explicit operator bool() const { return inode_ != nullptr; }
  const InodeRef& ref() const { return inode_; }
  InodeState* operator->() const { return inode_.get(); }
  InodeState& operator*() const { return *inode_; }

 private:
  friend class InodeTable;
  InodePin(InodeTable* table, InodeRef inode) : table_(table), inode_(std::move(inode)) {}
  InodeTable* table_ = nullptr;
  InodeRef inode_;
};

// A pin shared by copies of a callback; released with the last copy (or
// moved out by the holder that ends the work it kept).
using SharedPin = std::shared_ptr<InodePin>;
inline SharedPin Share(InodePin pin) { return std::make_shared<InodePin>(std::move(pin)); }

class InodeTable {
 public:
  // Loads an inode's committed record (Index::GetInode).
  using LoadFn = std::function<Result<index::Inode>(uint64_t ino)>;
  // Runs under the table's mutex when a state leaves the table.
  using UnloadFn = std::function<void(const InodeState&)>;

  InodeTable(LoadFn load, UnloadFn on_unload);
  // Drops every state (returns their staging buffers). REQUIRES: no pins.
  ~InodeTable();

  // The live state of `ino`, loaded from the index if it is not in the
  // table (EUCLEAN for a record whose extent crosses a chunk boundary,
  // else the index's errors). Holds nothing on it: use it while a count
  // you hold keeps it, or take GetPinned().
  Result<InodeRef> Get(uint64_t ino);
  // Get() plus a pin taken on the state the table holds at that moment
  // (reloaded if it was unloaded in between), so a later Get() cannot load
  // a stale copy while the caller works on this one.
  Result<InodePin> GetPinned(uint64_t ino);
  // A pin on `inode` as it is: the caller got it from the table and holds
  // a reference, and the table may have dropped it since (the pin then
  // keeps only the reference; releasing it unloads nothing).
  InodePin Pin(const InodeRef& inode);
  // A pin on `inode` only if it is still the table's state for its number;
  // empty otherwise (unloaded since the caller looked it up).
  InodePin PinIfCurrent(const InodeRef& inode);

  // --- The kernel's lookup count.
  // Get() plus one kernel lookup, on the state the table holds.
  Result<InodeRef> GetLookedUp(uint64_t ino);
  // Subtracts `n` (floored at 0; the root keeps 1).
  void Forget(uint64_t ino, uint64_t n);

  // --- Open handles.
  void AddOpen(InodeState& inode);
  // Returns true if that was the last handle. Does not unload: call
  // UnloadIfUnused() once the last close's work is queued.
  bool DropOpen(InodeState& inode);
  int opens(const InodeState& inode) const;

  // A new state for a record that is not in the index yet (a unique cache
  // token; durable_nlink = rec.nlink, durable_size 0: nothing captured);
  // not in the table until Insert().
  InodeRef Make(index::Inode rec);
  // Puts a new inode in the table with `lookups` kernel lookups and `opens`
  // handles (create(2) returns it open).
  void Insert(const InodeRef& inode, uint64_t lookups, int opens);
  // Unloads `inode` (drops it from memory) if nothing counts it any more.
  void UnloadIfUnused(const InodeRef& inode);

  // Every state in the table now.
  std::vector<InodeRef> All() const;
  size_t size() const;

 private:
  friend class InodePin;
  void Unpin(const InodeRef& inode);
  void MaybeUnloadLocked(const InodeRef& inode);  // REQUIRES: mu_ held
  Result<InodeRef> Load(uint64_t ino);

  const LoadFn load_;
  const UnloadFn on_unload_;
  std::atomic<uint64_t> next_token_{1};
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, InodeRef> inodes_;  // GUARDED_BY(mu_)
};

inline void InodePin::Reset() {
  if (table_ != nullptr && inode_) table_->Unpin(inode_);
  table_ = nullptr;
  inode_.reset();
}

}  // namespace kvfs::fs
