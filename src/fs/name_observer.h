// NameObserver: told of every name a regular file gains or loses, so that
// what follows names (the eviction order, fs/victim_order.h) never has to
// find out by itself.
//
// Contract for the caller (whoever changes the namespace): each call is
// made holding ns_mu_ exclusively, after the change is decided and in the
// order the changes happen, once per name gained or lost; directories are
// not reported. Names of files that are not regular are never passed.
//
// Thread safety: implementations may be called from any thread; calls come
// one at a time (ns_mu_), so an implementation's own lock is taken last.
#pragma once

#include <cstdint>
#include <string_view>

namespace kvfs::fs {

class NameObserver {
 public:
  virtual ~NameObserver() = default;
  // Regular file `ino` got the name `name` in `parent` at `now_ns`: created,
  // linked (an O_TMPFILE's one link) or put in place by WriteFile. Counts
  // as a use at `now_ns` (a store is a use).
  virtual void Named(uint64_t ino, uint64_t parent, std::string_view name, int64_t now_ns) = 0;
  // Regular file `ino` now has the name `name` in `parent` (rename); its
  // last use is unchanged.
  virtual void Renamed(uint64_t ino, uint64_t parent, std::string_view name) = 0;
  // Regular file `ino` lost its name: unlinked, replaced by a rename or a
  // WriteFile, or evicted. An open file stays readable (an orphan) but is
  // no longer named.
  virtual void Unnamed(uint64_t ino) = 0;
};

// Tells no one: the observer of a namespace nothing follows (eviction off).
class NullNameObserver final : public NameObserver {
 public:
  void Named(uint64_t, uint64_t, std::string_view, int64_t) override {}
  void Renamed(uint64_t, uint64_t, std::string_view) override {}
  void Unnamed(uint64_t) override {}
};

}  // namespace kvfs::fs
