// NameChange: one namespace change (create, mkdir, the link of an O_TMPFILE
// file, unlink, rmdir, rename, WriteFile's publish), applied to the live
// inodes and recorded for the index in one place.
//
// Each call changes the live state at once: the parent's entry count, its
// link count for a subdirectory, its mtime and ctime; the child's link
// count and ctime, a moved directory's parent; a file that loses its only
// name becomes an orphan if it is open (its orphan key is put; its delete
// follows its last close) and is deleted otherwise, as is an empty
// directory. The same call records the change for the index: the entry
// ops, the deltas the committer applies to the durable counts in queue
// order (fs/inode_state.h), the inodes whose records the commit captures,
// the records and orphan keys it deletes. The observer (the eviction
// order) hears every regular file's name change. The caller then queues
// change() with the namespace's pending entries, in the same hold of the
// namespace lock (FileSystem::Impl::QueueNameChange), so the overlay, the
// live state and the queue agree on order.
//
// Thread safety: built by one thread that holds the namespace lock
// exclusively from the first call until the change is queued. A call takes
// the InodeStates' mu one at a time, never two at once, and may call the
// observer after (its lock comes last).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "common/status.h"
#include "fs/committer.h"
#include "fs/inode_state.h"
#include "fs/inode_table.h"
#include "fs/name_observer.h"

namespace kvfs::fs {

// Whether `x`, an inode without a link, may take one now: OK for an
// O_TMPFILE file opened without O_EXCL and still open; ENOENT once its last
// handle closed (link(2) of a file whose count dropped to 0); EPERM for
// anything else (kvfs has no hard links). REQUIRES: x.mu() held.
Status Linkable(const InodeState& x);

class NameChange {
 public:
  // `table` counts the opens that decide orphan or delete; `observer` may
  // be null (no eviction). Every change made is stamped `now_ns`.
  NameChange(const InodeTable& table, NameObserver* observer, int64_t now_ns);

  // `child`, a new inode (InodeTable::Make; its record carries its link
  // count), takes `name` in `parent`, a name that is free.
  void Link(const InodeRef& parent, std::string_view name, const InodeRef& child);
  // As Link, for an O_TMPFILE file without a link taking its one link (its
  // orphan key goes): fails as Linkable() says, checked under child->mu()
  // where its last close decides its delete, and then nothing has changed.
  Status LinkUnnamed(const InodeRef& parent, std::string_view name, const InodeRef& child);
  // `name` in `parent` goes, and `victim`, the regular file or empty
  // directory it names (the caller checked which), loses its only name.
  void Unlink(const InodeRef& parent, std::string_view name, const InodeRef& victim);
  // `name` in `parent` names `child`, a new inode as in Link, instead of
  // `old`, which loses its name as in Unlink; with `old` null, as Link.
  void Replace(const InodeRef& parent, std::string_view name, const InodeRef& child,
               const InodeRef& old);
  // `child`, named `from_name` in `from`, takes `to_name` in `to`
  // instead of `old` (null: the name is free), which loses its name as in
  // Unlink. The caller checked rename(2)'s rules (types, emptiness, no
  // directory below itself).
  void Move(const InodeRef& from, std::string_view from_name, const InodeRef& to,
            std::string_view to_name, const InodeRef& child, const InodeRef& old);

  // The change built so far; the caller adds waiters and queues it.
  const std::shared_ptr<Change>& change() const { return change_; }
  int64_t now_ns() const { return now_ns_; }

 private:
  // The child's side of taking a name: the observer, the capture.
  void TakeName(const InodeRef& parent, std::string_view name, const InodeRef& child);
  // `victim` loses its only name, held in `parent` (no entry op).
  void DropName(const InodeRef& parent, const InodeRef& victim);
  // `parent` holds `entries` more names, `subdirs` of them directories.
  void EditParent(const InodeRef& parent, int64_t entries, int32_t subdirs);
  void PutEntry(const InodeRef& parent, std::string_view name, uint64_t child);
  // The commit captures `inode`'s live record (once however often asked).
  void Capture(const InodeRef& inode);

  const InodeTable& table_;
  NameObserver* const observer_;
  const int64_t now_ns_;
  const std::shared_ptr<Change> change_ = std::make_shared<Change>();
};

}  // namespace kvfs::fs
