#include "fs/name_change.h"

#include <algorithm>
#include <mutex>
#include <string>

namespace kvfs::fs {

Status Linkable(const InodeState& x) {
  if (x.linkable && x.orphan && !x.deleted) return Status::OK();
  // The kernel links only a file that is open: its last handle went.
  if (x.linkable) return Status::Error(ENOENT, "link: the unnamed file was closed");
  // EPERM is link(2)'s "the filesystem does not support hard links".
  return Status::Error(EPERM, "link: hard links are not supported (only the one link that "
                              "names an O_TMPFILE file)");
}

NameChange::NameChange(const InodeTable& table, NameObserver* observer, int64_t now_ns)
    : table_(table), observer_(observer), now_ns_(now_ns) {}

void NameChange::Link(const InodeRef& parent, std::string_view name, const InodeRef& child) {
  Replace(parent, name, child, nullptr);
}

Status NameChange::LinkUnnamed(const InodeRef& parent, std::string_view name,
                               const InodeRef& child) {
  {
    MutexLock l(child->mu());
    // Decided under child->mu(), where Release() decides to delete an
    // unnamed file: a last close racing this either comes first (ENOENT)
    // or finds a file with a name (kept).
    KVFS_RETURN_IF_ERROR(Linkable(*child));
    child->linkable = false;
    child->orphan = false;
    child->rec.nlink = 1;
    child->rec.ctime_ns = now_ns_;
  }
  change_->deltas.push_back({child, 0, +1});
  change_->orphan_deletes.push_back(child->ino);
  Link(parent, name, child);
  return Status::OK();
}

void NameChange::Unlink(const InodeRef& parent, std::string_view name, const InodeRef& victim) {
  DropName(parent, victim);
  PutEntry(parent, name, 0);
}

void NameChange::Replace(const InodeRef& parent, std::string_view name, const InodeRef& child,
                         const InodeRef& old) {
  TakeName(parent, name, child);
  if (old) DropName(parent, old);  // its readers keep it (an orphan while open)
  EditParent(parent, +1, child->is_dir() ? +1 : 0);
  PutEntry(parent, name, child->ino);
}

void NameChange::Move(const InodeRef& from, std::string_view from_name, const InodeRef& to,
                      std::string_view to_name, const InodeRef& child, const InodeRef& old) {
  const bool dir = child->is_dir();
  if (old) DropName(to, old);
  EditParent(from, -1, dir ? -1 : 0);
  PutEntry(from, from_name, 0);
  {
    MutexLock l(child->mu());
    child->rec.ctime_ns = now_ns_;
    if (dir) child->rec.parent = to->ino;  // its ".."
  }
  if (observer_ && child->is_reg()) observer_->Moved(child->ino, to->ino, to_name);
  Capture(child);
  EditParent(to, +1, dir ? +1 : 0);
  PutEntry(to, to_name, child->ino);
}

void NameChange::TakeName(const InodeRef& parent, std::string_view name, const InodeRef& child) {
  if (observer_ && child->is_reg()) observer_->Named(child->ino, parent->ino, name, now_ns_);
  Capture(child);
}

void NameChange::DropName(const InodeRef& parent, const InodeRef& victim) {
  {
    MutexLock l(victim->mu());
    // Decided under victim->mu(), where Open() checks `deleted` and counts
    // itself: an open racing this either counts first (the file becomes
    // an orphan) or sees it deleted (ESTALE), never a handle on a file
    // whose data is freed.
    const bool open = !victim->is_dir() && table_.opens(*victim) > 0;
    change_->deltas.push_back({victim, 0, -static_cast<int32_t>(victim->rec.nlink)});
    victim->rec.nlink = 0;
    victim->rec.ctime_ns = now_ns_;
    if (open) {
      victim->orphan = true;
      victim->orphan_queued = false;  // until queuing the change settles it
      change_->orphan_puts.push_back(victim->ino);
      Capture(victim);
    } else {
      victim->deleted = true;
      change_->deletes.push_back(victim);
    }
  }
  if (observer_ && victim->is_reg()) observer_->Unnamed(victim->ino);
  EditParent(parent, -1, victim->is_dir() ? -1 : 0);
}

void NameChange::EditParent(const InodeRef& parent, int64_t entries, int32_t subdirs) {
  {
    MutexLock l(parent->mu());
    parent->rec.size = static_cast<uint64_t>(static_cast<int64_t>(parent->rec.size) + entries);
    parent->rec.nlink = static_cast<uint32_t>(static_cast<int32_t>(parent->rec.nlink) + subdirs);
    parent->rec.mtime_ns = parent->rec.ctime_ns = now_ns_;
  }
  change_->deltas.push_back({parent, entries, subdirs});
  Capture(parent);
}

void NameChange::PutEntry(const InodeRef& parent, std::string_view name, uint64_t child) {
  change_->entry_ops.push_back({parent->ino, std::string(name), child});
}

void NameChange::Capture(const InodeRef& inode) {
  auto& inodes = change_->inodes;
  if (std::find(inodes.begin(), inodes.end(), inode) == inodes.end()) inodes.push_back(inode);
}

}  // namespace kvfs::fs
