#include "fsck/namespace_check.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include "common/format.h"

namespace kvfs::fsck {

namespace {

using namespace inode_flags;  // NOLINT: flag names read better unqualified

class NamespaceChecker {
 public:
  NamespaceChecker(Model& m, bool mounted, std::vector<Finding>* out)
      : m_(m), mounted_(mounted), out_(out) {}

  void Run() {
    CheckRoot();
    CheckModes();
    LinkEntries();
    CheckEntries();
    CheckOrphans();
    CheckCounts();
    if (tree_ok_) CheckReachability();
  }

 private:
  Finding& Add(FindingKind kind, uint64_t ino, std::string path, std::string problem,
               std::string fix) {
    Finding f;
    f.kind = kind;
    f.ino = ino;
    f.path = std::move(path);
    f.problem = std::move(problem);
    f.fix = std::move(fix);
    out_->push_back(std::move(f));
    return out_->back();
  }

  bool Live(uint32_t i) const { return !(m_.inodes[i].flags & kReclaim); }

  // True if some stored entry lives in directory `ino`.
  bool HasChildren(uint64_t ino) const {
    auto it = std::lower_bound(m_.entries.begin(), m_.entries.end(), ino,
                               [](const EntryRec& e, uint64_t v) { return e.parent < v; });
    return it != m_.entries.end() && it->parent == ino;
  }

  void CheckRoot() {
    if (m_.root == kNone) {
      Add(FindingKind::kMissingRoot, kRootIno, "/", "the root directory (inode 1) is missing",
          "create an empty root directory (the entries recorded in it stay)");
      InodeRec r;
      r.ino = kRootIno;
      r.mode = S_IFDIR | 0755;
      r.nlink = 2;
      m_.root = m_.AddInode(r);
    } else if (!m_.inodes[m_.root].is_dir()) {
      Add(FindingKind::kMissingRoot, kRootIno, "/",
          "the root inode is not a directory; the namespace cannot be checked", "");
      tree_ok_ = false;
    }
  }

  void CheckModes() {
    for (uint32_t i = 0; i < m_.inodes.size(); ++i) {
      InodeRec& r = m_.inodes[i];
      if (r.is_dir() || r.is_reg()) continue;
      char buf[64];
      std::snprintf(buf, sizeof buf, "file type 0%o is neither a regular file nor a directory",
                    r.mode & S_IFMT);
      const bool dir = HasChildren(r.ino) && r.ext_count == 0;
      Add(FindingKind::kBadMode, r.ino, "<inode " + std::to_string(r.ino) + ">", buf,
          dir ? "make it a directory (entries live in it)" : "make it a regular file");
      r.mode = (r.mode & 07777) | (dir ? S_IFDIR : S_IFREG);
      r.flags |= kRewrite;
    }
  }

  // Resolves every entry's inodes and counts names, entries and
  // subdirectories as stored.
  void LinkEntries() {
    for (EntryRec& e : m_.entries) {
      e.parent_idx = m_.Find(e.parent);
      e.child_idx = m_.Find(e.child);
      InodeRec* c = e.child_idx != kNone ? &m_.inodes[e.child_idx] : nullptr;
      if (e.parent_idx != kNone && m_.inodes[e.parent_idx].is_dir()) {
        InodeRec& p = m_.inodes[e.parent_idx];
        p.entries++;
        if (c && c->is_dir()) p.subdirs++;
      }
      if (c) c->names++;
    }
    // Entries whose value does not decode still counted in their directory.
    for (const BadKey& b : m_.bad_keys) {
      if (b.cf != index::kEntriesCf || b.entry_parent == 0) continue;
      const uint32_t p = m_.Find(b.entry_parent);
      if (p != kNone && m_.inodes[p].is_dir()) m_.inodes[p].entries++;
    }
  }

  void CheckEntries() {
    std::vector<uint32_t> extra;
    for (uint32_t i = 0; i < m_.entries.size(); ++i) {
      EntryRec& e = m_.entries[i];
      if (e.parent_idx == kNone || !m_.inodes[e.parent_idx].is_dir()) {
        Add(FindingKind::kBadParent, e.child, m_.EntryPath(e),
            e.parent_idx == kNone
                ? "entry inside inode " + std::to_string(e.parent) + ", which does not exist"
                : "entry inside inode " + std::to_string(e.parent) + ", which is not a directory",
            "remove the entry");
        e.flags |= entry_flags::kDeleted;
        continue;
      }
      if (e.child_idx == kNone) {
        Add(FindingKind::kDanglingEntry, 0, m_.EntryPath(e),
            "names inode " + std::to_string(e.child) + ", which does not exist",
            "remove the entry");
        e.flags |= entry_flags::kDeleted;
        continue;
      }
      if (e.child == kRootIno) {
        Add(FindingKind::kDirLoop, kRootIno, m_.EntryPath(e),
            "names the root directory (a loop)", "remove the entry");
        e.flags |= entry_flags::kDeleted;
        continue;
      }
      InodeRec& c = m_.inodes[e.child_idx];
      if (c.orig_name == kNone) {
        c.orig_name = c.name = i;
      } else {
        extra.push_back(i);
      }
    }
    for (uint32_t i : extra) {
      const uint32_t ci = m_.entries[i].child_idx;
      InodeRec& c = m_.inodes[ci];
      uint32_t drop = i;
      // A directory keeps the name its parent field agrees with.
      if (c.is_dir() && m_.entries[i].parent == c.parent &&
          m_.entries[c.name].parent != c.parent) {
        drop = c.name;
        c.orig_name = c.name = i;
      }
      const std::string kept = m_.PathOf(ci);
      Add(FindingKind::kMultipleNames, c.ino, m_.EntryPath(m_.entries[drop]),
          c.is_dir() ? "directory is also named " + kept + " (a directory has one name)"
                     : "file is also named " + kept + " (kvfs has no hard links)",
          "remove this name (" + kept + " stays)");
      m_.entries[drop].flags |= entry_flags::kDeleted;
    }
  }

  void CheckOrphans() {
    for (uint64_t ino : m_.orphan_keys) {
      const uint32_t i = m_.Find(ino);
      if (i == kNone) {
        Add(FindingKind::kOrphanKey, ino, "",
            "orphan record for inode " + std::to_string(ino) + ", which does not exist",
            "remove the orphan record");
        m_.orphan_key_deletes.push_back(ino);
        continue;
      }
      InodeRec& r = m_.inodes[i];
      r.flags |= kOrphanKey;
      if (r.name != kNone) {
        Add(FindingKind::kOrphanKey, ino, m_.PathOf(i),
            "is named but also recorded as an orphan (unlinked while open)",
            "clear the orphan record (the file stays)");
        m_.orphan_key_deletes.push_back(ino);
      } else if (r.is_dir() && r.entries > 0) {
        Add(FindingKind::kOrphanKey, ino, m_.PathOf(i),
            "directory with entries recorded as an orphan",
            "clear the orphan record (the directory goes to /lost+found)");
        m_.orphan_key_deletes.push_back(ino);
      } else if (mounted_) {
        Finding& f = Add(FindingKind::kOrphan, ino, m_.PathOf(i),
                         "no name and open: unlinked while open, or O_TMPFILE not linked "
                         "yet (" + std::to_string(r.size) + " bytes)",
                         "still open on the mounted volume");
        f.severity = Severity::kInfo;
        r.flags |= kReclaim;  // live: neither linked nor reclaimed by this run
      } else {
        Add(FindingKind::kOrphan, ino, m_.PathOf(i),
            "unlinked while open (or O_TMPFILE never linked) and not released before the "
            "volume was last closed (" +
                std::to_string(r.size) + " bytes in " + std::to_string(r.ext_count) +
                " extent(s))",
            "reclaim it (delete the inode; its blocks become free)");
        r.flags |= kReclaim;
      }
    }
  }

  void CheckCounts() {
    for (uint32_t i = 0; i < m_.inodes.size(); ++i) {
      InodeRec& r = m_.inodes[i];
      if (!Live(i) || (r.flags & kCreated)) continue;
      if (r.is_reg()) {
        // A file without names and not an orphan is reported unreachable;
        // its count is fixed with its new name.
        const bool unnamed = r.names == 0 && !(r.flags & kOrphanKey);
        if (r.nlink != r.names && !unnamed) {
          Add(FindingKind::kNlink, r.ino, m_.PathOf(i),
              "link count " + std::to_string(r.nlink) + ", but " + std::to_string(r.names) +
                  " entr" + (r.names == 1 ? "y names" : "ies name") + " it",
              "set it to the number of names");
        }
        continue;
      }
      if (!r.is_dir()) continue;
      if (r.nlink != 2 + r.subdirs) {
        Add(FindingKind::kNlink, r.ino, m_.PathOf(i),
            "link count " + std::to_string(r.nlink) + ", expected " +
                std::to_string(2 + r.subdirs) + " (2 + " + std::to_string(r.subdirs) +
                " subdirectories)",
            "set it to 2 + its subdirectories");
      }
      if (r.size != r.entries) {
        Add(FindingKind::kEntryCount, r.ino, m_.PathOf(i),
            "directory records " + std::to_string(r.size) + " entries, but holds " +
                std::to_string(r.entries),
            "set the entry count");
      }
      if (r.ino == kRootIno) {
        if (r.parent != 0 && r.parent != kRootIno) {
          Add(FindingKind::kDirParent, r.ino, "/",
              "root's parent field is inode " + std::to_string(r.parent), "clear it");
        }
      } else if (r.orig_name != kNone && r.parent != m_.entries[r.orig_name].parent) {
        Add(FindingKind::kDirParent, r.ino, m_.PathOf(i),
            "parent field says inode " + std::to_string(r.parent) + ", but it is named in inode " +
                std::to_string(m_.entries[r.orig_name].parent),
            "set the parent field");
      }
    }
  }

  // Reachability over the names that remain after the planned repairs:
  // 2 reachable, 3 not. Reclaimed inodes count as reachable (they go away).
  std::vector<uint8_t> Reach() const {
    std::vector<uint8_t> st(m_.inodes.size(), 0);
    std::vector<uint32_t> walk;
    for (uint32_t i = 0; i < m_.inodes.size(); ++i) {
      if (st[i] != 0) continue;
      walk.clear();
      uint8_t result = 3;
      uint32_t cur = i;
      while (true) {
        if (cur == m_.root || !Live(cur) || st[cur] == 2) {
          result = 2;
          break;
        }
        if (st[cur] == 3 || st[cur] == 1) break;  // 1: a loop on this walk
        st[cur] = 1;
        walk.push_back(cur);
        const uint32_t e = m_.inodes[cur].name;
        if (e == kNone) break;
        cur = m_.entries[e].parent_idx;
      }
      for (uint32_t w : walk) st[w] = result;
      if (st[i] == 0) st[i] = result;
    }
    return st;
  }

  std::string Describe(const InodeRec& r) const {
    if (r.is_dir()) return "directory with " + std::to_string(r.entries) + " entries";
    return "file of " + std::to_string(r.size) + " bytes";
  }

  void CheckReachability() {
    std::vector<uint8_t> st = Reach();
    // Unnamed inodes: link each into /lost+found; what lies below them
    // becomes reachable with them.
    bool moved = false;
    // Moving adds /lost+found to the inodes: iterate over those known.
    const auto n = static_cast<uint32_t>(st.size());
    for (uint32_t i = 0; i < n; ++i) {
      if (st[i] != 3 || m_.inodes[i].name != kNone) continue;
      const InodeRec r = m_.inodes[i];
      Finding& f =
          Add(FindingKind::kUnreachable, r.ino, "<unlinked inode " + std::to_string(r.ino) + ">",
              Describe(r) + " has no name and is not an orphan", "");
      auto to = m_.MoveToLostFound(i);
      if (to.ok()) {
        f.fix = "link it as " + *to;
        moved = true;
      } else {
        f.problem += "; " + to.status().context();
      }
    }
    if (moved) st = Reach();
    // What is still unreachable hangs off a loop of directories: break each
    // loop at its lowest inode number.
    std::vector<uint32_t> mark(st.size(), 0);
    uint32_t walk_id = 0;
    for (uint32_t i = 0; i < st.size(); ++i) {
      if (st[i] != 3 || mark[i] != 0) continue;
      ++walk_id;
      std::vector<uint32_t> path;
      uint32_t cur = i;
      while (cur != kNone && cur < st.size() && mark[cur] == 0 && st[cur] == 3) {
        mark[cur] = walk_id;
        path.push_back(cur);
        const uint32_t e = m_.inodes[cur].name;
        cur = e == kNone ? kNone : m_.entries[e].parent_idx;
      }
      if (cur == kNone || cur >= st.size() || mark[cur] != walk_id) continue;  // known chain
      auto start = std::find(path.begin(), path.end(), cur);
      std::vector<uint32_t> loop(start, path.end());
      uint32_t pick = *std::min_element(loop.begin(), loop.end(), [&](uint32_t a, uint32_t b) {
        return m_.inodes[a].ino < m_.inodes[b].ino;
      });
      std::string members;
      for (size_t k = 0; k < loop.size() && k < 4; ++k) {
        const InodeRec& r = m_.inodes[loop[k]];
        members += (k ? ", " : "") + std::to_string(r.ino) + " ('" +
                   std::string(m_.Name(m_.entries[r.name])) + "')";
      }
      if (loop.size() > 4) members += ", ...";
      const uint64_t pick_ino = m_.inodes[pick].ino;
      Finding& f = Add(FindingKind::kDirLoop, pick_ino,
                       "<inode " + std::to_string(pick_ino) + ">",
                       "directories " + members + " form a loop not connected to the root", "");
      auto to = m_.MoveToLostFound(pick);
      if (to.ok()) {
        f.fix = "move inode " + std::to_string(pick_ino) + " to " + *to;
      } else {
        f.problem += "; " + to.status().context();
      }
    }
  }

  Model& m_;
  const bool mounted_;
  std::vector<Finding>* out_;
  bool tree_ok_ = true;
};

}  // namespace

void CheckNamespace(Model& m, bool mounted, std::vector<Finding>* out) {
  NamespaceChecker(m, mounted, out).Run();
}

}  // namespace kvfs::fsck
