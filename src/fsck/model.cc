#include "fsck/model.h"

#include <rocksdb/db.h>
#include <sys/stat.h>

#include <algorithm>
#include <memory>

#include "common/format.h"

namespace kvfs::fsck {

namespace {

uint64_t EstimateKeys(const index::Index& index, const char* cf) {
  uint64_t n = 0;
  rocksdb::ColumnFamilyHandle* h = index.handle(cf);
  if (h == nullptr || !index.db()->GetIntProperty(h, "rocksdb.estimate-num-keys", &n)) return 0;
  return n;
}

Finding BadRecord(const Status& st, const char* fix) {
  Finding f;
  f.kind = FindingKind::kBadRecord;
  f.problem = "index record does not decode: " + st.context();
  f.fix = fix;
  return f;
}

// Progress updates every this many records: cheap, and often enough.
constexpr uint64_t kProgressEvery = 1 << 16;

}  // namespace

Status Model::Load(index::Index& idx, Progress* progress, std::vector<Finding>* findings) {
  index = &idx;
  bool bad_inodes = false, bad_entries = false, bad_orphans = false;

  if (progress) progress->Begin("inodes", EstimateKeys(idx, index::kInodesCf), false);
  uint64_t n = 0;
  KVFS_RETURN_IF_ERROR(idx.ForEachInode(
      [&](const index::Inode& in) {
        InodeRec r;
        r.ino = in.ino;
        r.size = in.size;
        r.parent = in.parent;
        r.mode = in.mode;
        r.nlink = in.nlink;
        r.ext_begin = extents.size();
        r.ext_count = static_cast<uint32_t>(in.extents.size());
        for (const index::FileExtent& fe : in.extents) {
          extents.push_back(ExtentRec{fe.file_off, fe.ext, fe.crc32c});
        }
        // Attributes live in the record (index/records.h): they cannot be
        // orphaned, only break the limits, which repair enforces.
        if (Status x = index::CheckXattrs(in.xattrs); !x.ok()) {
          Finding f;
          f.kind = FindingKind::kBadXattr;
          f.ino = in.ino;
          f.path = "<inode " + std::to_string(in.ino) + ">";
          f.problem = x.context();
          f.fix = "drop the attributes kvfs would not store (bad names or sizes, past the "
                  "per-inode total)";
          findings->push_back(std::move(f));
          r.flags |= inode_flags::kRewrite;
        }
        inodes.push_back(r);
        if (progress && ++n % kProgressEvery == 0) progress->Update(n);
        return true;
      },
      [&](const Status& bad) {
        findings->push_back(BadRecord(
            bad, "delete the record (the inode's metadata is unreadable: entries naming it are "
                 "removed, its blocks become free)"));
        bad_inodes = true;
        return true;
      }));
  if (progress) progress->End();
  sorted_count_ = inodes.size();
  if (!inodes.empty() && inodes.back().ino < 8 * inodes.size() + (1 << 20)) {
    dense_.assign(inodes.back().ino + 1, kNone);
    for (uint32_t i = 0; i < inodes.size(); ++i) dense_[inodes[i].ino] = i;
  }
  entries.reserve(EstimateKeys(idx, index::kEntriesCf) + 16);

  if (progress) progress->Begin("entries", EstimateKeys(idx, index::kEntriesCf), false);
  n = 0;
  KVFS_RETURN_IF_ERROR(idx.ForEachEntry(
      [&](uint64_t parent, std::string_view name, uint64_t child) {
        EntryRec e;
        e.parent = parent;
        e.child = child;
        e.name_off = names.size();
        e.name_len = static_cast<uint16_t>(name.size());
        names.append(name);
        entries.push_back(e);
        if (progress && ++n % kProgressEvery == 0) progress->Update(n);
        return true;
      },
      [&](const Status& bad) {
        findings->push_back(
            BadRecord(bad, "delete the entry (the inode it named, if any, goes to /lost+found)"));
        bad_entries = true;
        return true;
      }));
  if (progress) progress->End();
  sorted_entries_ = entries.size();

  KVFS_RETURN_IF_ERROR(idx.ForEachOrphan(
      [&](uint64_t ino) {
        orphan_keys.push_back(ino);
        return true;
      },
      [&](const Status& bad) {
        findings->push_back(BadRecord(bad, "delete the orphan record"));
        bad_orphans = true;
        return true;
      }));

  // The scans' callbacks only see a description of a bad record; find the
  // keys themselves for repair.
  if (bad_inodes) KVFS_RETURN_IF_ERROR(FindBadKeys(idx, index::kInodesCf));
  if (bad_entries) KVFS_RETURN_IF_ERROR(FindBadKeys(idx, index::kEntriesCf));
  if (bad_orphans) KVFS_RETURN_IF_ERROR(FindBadKeys(idx, index::kOrphansCf));
  root = Find(kRootIno);
  return Status::OK();
}

Status Model::FindBadKeys(const index::Index& idx, const char* cf) {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.total_order_seek = true;
  std::unique_ptr<rocksdb::Iterator> it(idx.db()->NewIterator(ro, idx.handle(cf)));
  const std::string_view which = cf;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    const std::string_view value(it->value().data(), it->value().size());
    bool ok = false;
    BadKey bad;
    if (which == index::kInodesCf) {
      auto ino = index::DecodeInodeKey(key);
      ok = ino.ok() && index::Inode::Decode(*ino, value).ok();
    } else if (which == index::kEntriesCf) {
      auto k = index::DecodeEntryKey(key);
      ok = k.ok() && index::DecodeEntryValue(value).ok();
      if (k.ok()) bad.entry_parent = k->parent;
    } else {
      ok = index::DecodeInodeKey(key).ok() && index::DecodeOrphanValue(value).ok();
    }
    if (!ok) {
      bad.cf = cf;
      bad.key = std::string(key);
      bad_keys.push_back(std::move(bad));
    }
  }
  if (!it->status().ok()) {
    return Status::Error(EIO, "index " + idx.dir() + ": scanning " + std::string(cf) + ": " +
                                  it->status().ToString());
  }
  return Status::OK();
}

uint32_t Model::Find(uint64_t ino) const {
  if (!dense_.empty()) {
    if (ino < dense_.size() && dense_[ino] != kNone) return dense_[ino];
    for (size_t i = sorted_count_; i < inodes.size(); ++i) {
      if (inodes[i].ino == ino) return static_cast<uint32_t>(i);
    }
    return kNone;
  }
  auto end = inodes.begin() + static_cast<std::ptrdiff_t>(sorted_count_);
  auto it = std::lower_bound(inodes.begin(), end, ino,
                             [](const InodeRec& r, uint64_t v) { return r.ino < v; });
  if (it != end && it->ino == ino) return static_cast<uint32_t>(it - inodes.begin());
  for (size_t i = sorted_count_; i < inodes.size(); ++i) {
    if (inodes[i].ino == ino) return static_cast<uint32_t>(i);
  }
  return kNone;
}

std::string Model::PathOf(uint32_t idx) const {
  std::vector<std::string_view> parts;
  std::string prefix;
  uint32_t cur = idx;
  // Deep enough for any real tree; a longer chain is a loop.
  for (int depth = 0; depth < 4096; ++depth) {
    const InodeRec& r = inodes[cur];
    if (r.ino == kRootIno) break;
    const uint32_t e = r.orig_name != kNone ? r.orig_name : r.name;
    if (e == kNone) {
      prefix = (cur == idx ? "<unlinked inode " : "<inode ") + std::to_string(r.ino) + ">";
      break;
    }
    parts.push_back(Name(entries[e]));
    const uint32_t p = entries[e].parent_idx;
    if (p == kNone) {
      prefix = "<inode " + std::to_string(entries[e].parent) + ">";
      break;
    }
    cur = p;
    if (depth == 4095) prefix = "<loop>";
  }
  std::string s = prefix;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    s += '/';
    s.append(*it);
  }
  return s.empty() ? "/" : s;
}

std::string Model::EntryPath(const EntryRec& e) const {
  std::string s;
  if (e.parent_idx == kNone) {
    s = "<inode " + std::to_string(e.parent) + ">";
  } else if (e.parent != kRootIno) {
    s = PathOf(e.parent_idx);
  }
  s += '/';
  s.append(Name(e));
  return s;
}

uint32_t Model::FindEntry(uint64_t parent, std::string_view name) const {
  auto end = entries.begin() + static_cast<std::ptrdiff_t>(sorted_entries_);
  auto it =
      std::lower_bound(entries.begin(), end, std::make_pair(parent, name),
                       [this](const EntryRec& e, const std::pair<uint64_t, std::string_view>& k) {
                         if (e.parent != k.first) return e.parent < k.first;
                         return Name(e) < k.second;
                       });
  if (it != end && it->parent == parent && Name(*it) == name &&
      !(it->flags & entry_flags::kDeleted)) {
    return static_cast<uint32_t>(it - entries.begin());
  }
  auto [lo, hi] = added_by_parent_.equal_range(parent);
  for (auto a = lo; a != hi; ++a) {
    const EntryRec& e = entries[a->second];
    if (Name(e) == name && !(e.flags & entry_flags::kDeleted)) return a->second;
  }
  return kNone;
}

uint32_t Model::AddEntry(uint32_t parent_idx, std::string_view name, uint32_t child_idx) {
  EntryRec e;
  e.parent = inodes[parent_idx].ino;
  e.child = inodes[child_idx].ino;
  e.parent_idx = parent_idx;
  e.child_idx = child_idx;
  e.name_off = names.size();
  e.name_len = static_cast<uint16_t>(name.size());
  e.flags = entry_flags::kAdded;
  names.append(name);
  const auto i = static_cast<uint32_t>(entries.size());
  entries.push_back(e);
  added_by_parent_.emplace(e.parent, i);
  inodes[child_idx].name = i;
  return i;
}

uint32_t Model::AddInode(const InodeRec& rec) {
  InodeRec r = rec;
  if (r.ino == 0) r.ino = index->AllocateIno();
  r.flags |= inode_flags::kCreated | inode_flags::kRewrite;
  r.ext_begin = extents.size();
  r.ext_count = 0;
  inodes.push_back(r);
  return static_cast<uint32_t>(inodes.size() - 1);
}

std::vector<ExtentRec> Model::FinalExtents(uint32_t idx) const {
  auto it = new_extents_.find(idx);
  if (it != new_extents_.end()) return it->second;
  const InodeRec& r = inodes[idx];
  return std::vector<ExtentRec>(
      extents.begin() + static_cast<std::ptrdiff_t>(r.ext_begin),
      extents.begin() + static_cast<std::ptrdiff_t>(r.ext_begin + r.ext_count));
}

void Model::SetExtents(uint32_t idx, std::vector<ExtentRec> list) {
  new_extents_[idx] = std::move(list);
  inodes[idx].flags |= inode_flags::kRewrite;
}

void Model::CompactExtents() {
  for (auto& [idx, list] : new_extents_) {
    std::erase_if(list, [](const ExtentRec& fe) { return fe.ext.len == 0; });
    std::sort(list.begin(), list.end(),
              [](const ExtentRec& a, const ExtentRec& b) { return a.file_off < b.file_off; });
  }
}

Result<std::string> Model::MoveToLostFound(uint32_t idx) {
  if (lost_found == kNone) {
    if (root == kNone || !inodes[root].is_dir()) {
      return Status::Error(ENOENT, "no root directory to hold /lost+found");
    }
    const uint32_t e = FindEntry(kRootIno, "lost+found");
    if (e != kNone) {
      const uint32_t c = entries[e].child_idx;
      if (c == kNone || !inodes[c].is_dir() || (inodes[c].flags & inode_flags::kReclaim) ||
          inodes[c].name != e) {
        return Status::Error(EEXIST, "/lost+found exists and is not a usable directory");
      }
      lost_found = c;
    } else {
      InodeRec r;
      r.mode = S_IFDIR | 0700;
      r.nlink = 2;
      r.parent = kRootIno;
      lost_found = AddInode(r);
      AddEntry(root, "lost+found", lost_found);
    }
  }
  if (idx == lost_found || idx == root) {
    return Status::Error(EINVAL, "cannot move /lost+found or the root into /lost+found");
  }
  InodeRec& r = inodes[idx];
  r.flags |= inode_flags::kDamaged;
  if (r.name != kNone && entries[r.name].parent_idx == lost_found) {
    return "/lost+found/" + std::string(Name(entries[r.name]));  // there already
  }
  std::string base = "#";  // not "#" + to_string(): GCC 12 -O3 warns falsely
  base += std::to_string(r.ino);
  const uint32_t old = r.orig_name != kNone ? r.orig_name : r.name;
  if (old != kNone) {
    base += '-';
    base.append(Name(entries[old]));
  }
  if (base.size() > kMaxNameLen) base.resize(kMaxNameLen);
  std::string name = base;
  const uint64_t lf_ino = inodes[lost_found].ino;
  for (int k = 1; FindEntry(lf_ino, name) != kNone; ++k) {
    std::string suffix = ".";
    suffix += std::to_string(k);
    name = base.substr(0, kMaxNameLen - suffix.size()) + suffix;
  }
  if (r.name != kNone) entries[r.name].flags |= entry_flags::kDeleted;
  AddEntry(lost_found, name, idx);
  return "/lost+found/" + name;
}

std::vector<Model::Final> Model::ComputeFinal() const {
  std::vector<Final> f(inodes.size());
  std::vector<uint32_t> names_of(inodes.size(), 0), subdirs(inodes.size(), 0);
  for (uint32_t i = 0; i < entries.size(); ++i) {
    const EntryRec& e = entries[i];
    if (e.flags & entry_flags::kDeleted) continue;
    if (e.parent_idx == kNone || e.child_idx == kNone) continue;  // deleted by the checks
    names_of[e.child_idx]++;
    f[e.parent_idx].size++;
    if (inodes[e.child_idx].is_dir()) subdirs[e.parent_idx]++;
    if (inodes[e.child_idx].name == i) f[e.child_idx].parent = e.parent;
  }
  for (uint32_t i = 0; i < inodes.size(); ++i) {
    const InodeRec& r = inodes[i];
    if (r.is_dir()) {
      f[i].nlink = 2 + subdirs[i];
      if (r.ino == kRootIno) f[i].parent = (r.parent == 0 || r.parent == kRootIno) ? r.parent : 0;
    } else {
      f[i].nlink = names_of[i];
      f[i].size = r.size;
      f[i].parent = r.parent;
    }
  }
  return f;
}

}  // namespace kvfs::fsck
