#include "fs/xattr.h"

#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>

namespace kvfs::fs::xattr {
namespace {

constexpr std::string_view kUser = "user.";
constexpr std::string_view kTrusted = "trusted.";
constexpr std::string_view kReserved = "user.kvfs.";

auto Find(std::vector<index::Xattr>& list, std::string_view name) {
  return std::lower_bound(list.begin(), list.end(), name,
                          [](const index::Xattr& x, std::string_view n) { return x.name < n; });
}

// The checks every call makes on a name, in the kernel's order: its
// length, then its namespace.
Status CheckName(std::string_view name, bool privileged, bool for_set) {
  if (name.empty() || name.size() > index::kXattrNameMax) {
    return Status::Error(ERANGE, "extended attribute name of " + std::to_string(name.size()) +
                                     " bytes (1.." + std::to_string(index::kXattrNameMax) + ")");
  }
  if (index::IsStoredXattrName(name)) {
    if (name.starts_with(kTrusted) && !privileged) {
      return Status::Error(EPERM, "trusted.* attributes need CAP_SYS_ADMIN");
    }
    return Status::OK();
  }
  if (name.starts_with(kReserved)) {
    return Status::Error(for_set ? EINVAL : ENODATA,
                         std::string(name) + ": user.kvfs.* names are reserved for kvfs");
  }
  if (name == kUser || name == kTrusted) {
    return Status::Error(EINVAL, std::string(name) + ": empty attribute name after the prefix");
  }
  if (IsNeverStored(name)) {
    return Status::Error(for_set ? EOPNOTSUPP : ENODATA,
                         std::string(name) + ": kvfs keeps no security.* or system.* attributes");
  }
  return Status::Error(EOPNOTSUPP, std::string(name) + ": only user.* and trusted.* are supported");
}

}  // namespace

bool IsNeverStored(std::string_view name) {
  return name.starts_with("security.") || name.starts_with("system.");
}

Status Set(std::vector<index::Xattr>& list, std::string_view name, std::string_view value,
           int flags, bool privileged) {
  if ((flags & ~(XATTR_CREATE | XATTR_REPLACE)) != 0 ||
      flags == (XATTR_CREATE | XATTR_REPLACE)) {
    return Status::Error(EINVAL, "setxattr flags " + std::to_string(flags));
  }
  KVFS_RETURN_IF_ERROR(CheckName(name, privileged, /*for_set=*/true));
  if (name == index::kEvictXattr && value != "lru" && value != "off") {
    return Status::Error(EINVAL, std::string(name) + ": the value is lru or off");
  }
  if (value.size() > index::kXattrValueMax) {
    return Status::Error(E2BIG, "extended attribute value of " + std::to_string(value.size()) +
                                    " bytes (at most " + std::to_string(index::kXattrValueMax) +
                                    ")");
  }
  auto it = Find(list, name);
  const bool exists = it != list.end() && it->name == name;
  if (exists && (flags & XATTR_CREATE)) return Status::Error(EEXIST, std::string(name));
  if (!exists && (flags & XATTR_REPLACE)) return Status::Error(ENODATA, std::string(name));
  size_t total = 0, names = 0;
  for (const index::Xattr& x : list) {
    if (x.name == name) continue;
    total += x.name.size() + 1 + x.value.size();
    names += x.name.size() + 1;
  }
  total += name.size() + 1 + value.size();
  names += name.size() + 1;
  if (total > index::kXattrInodeMax || names > index::kXattrListMax) {
    return Status::Error(ENOSPC, "extended attributes of one inode: at most " +
                                     std::to_string(index::kXattrInodeMax) +
                                     " bytes of names and values");
  }
  if (exists) {
    it->value.assign(value);
  } else {
    list.insert(it, index::Xattr{std::string(name), std::string(value)});
  }
  return Status::OK();
}

Result<std::string> Get(const std::vector<index::Xattr>& list, std::string_view name,
                        bool privileged) {
  KVFS_RETURN_IF_ERROR(CheckName(name, privileged, /*for_set=*/false));
  auto it = Find(const_cast<std::vector<index::Xattr>&>(list), name);
  if (it == list.end() || it->name != name) return Status::Error(ENODATA, std::string(name));
  return it->value;
}

std::string List(const std::vector<index::Xattr>& list, bool privileged) {
  std::string out;
  for (const index::Xattr& x : list) {
    if (!privileged && x.name.starts_with(kTrusted)) continue;
    out += x.name;
    out += '\0';
  }
  return out;
}

Status Remove(std::vector<index::Xattr>& list, std::string_view name, bool privileged) {
  KVFS_RETURN_IF_ERROR(CheckName(name, privileged, /*for_set=*/false));
  auto it = Find(list, name);
  if (it == list.end() || it->name != name) return Status::Error(ENODATA, std::string(name));
  list.erase(it);
  return Status::OK();
}

}  // namespace kvfs::fs::xattr
