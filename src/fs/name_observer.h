// NameObserver: told of every name a regular file takes, moves to or loses,
// as NameChange (fs/name_change.h) applies it. The eviction order
// (fs/victim_order.h; Recency) implements it, so that it tracks every name change the
// namespace makes without each change calling it by hand.
//
// Thread safety: called with the namespace lock held exclusively (one
// change at a time, in the order the changes are queued); an observer's
// own lock is taken last, after any InodeState's.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvfs::fs {

class NameObserver {
 public:
  virtual ~NameObserver() = default;
  // Regular file `ino` took `name` in `parent` at `now_ns` (create, the
  // link of an O_TMPFILE file, WriteFile): a use at that time.
  virtual void Named(uint64_t ino, uint64_t parent, std::string_view name, int64_t now_ns) = 0;
  // Regular file `ino` now has `name` in `parent` (rename); not a use.
  virtual void Moved(uint64_t ino, uint64_t parent, std::string_view name) = 0;
  // Regular file `ino` lost its name (unlink, replaced by a rename or
  // WriteFile, eviction).
  virtual void Unnamed(uint64_t ino) = 0;
};

}  // namespace kvfs::fs
