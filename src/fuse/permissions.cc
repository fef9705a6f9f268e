#include "fuse/permissions.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include <spdlog/spdlog.h>

#include "fs/access.h"
#include "fuse/reply.h"
#include "fuse/session_state.h"

namespace kvfs::fuse::perm {

namespace {

// The notification code of FUSE_NOTIFY_INC_EPOCH (protocol 7.44, Linux
// 6.16): libfuse 3.14 and older kernel headers do not name it.
constexpr int kNotifyIncEpoch = 8;

bool Checking(fuse_req_t req) { return StateOf(req).kvfs_permissions; }

Status Access(const fs::Caller& who, const fs::Attr& a, int want) {
  return fs::CheckAccess(a.mode, a.uid, a.gid, who, want);
}

Result<fs::Attr> Peek(fuse_req_t req, uint64_t ino) {
  return NoThrow([&] { return StateOf(req).fs->PeekAttr(ino); });
}

Result<fs::Attr> PeekEntry(fuse_req_t req, uint64_t parent, std::string_view name) {
  return NoThrow([&] { return StateOf(req).fs->PeekEntry(parent, name); });
}

// may_delete() of `name` in `dir` (attributes `d`), search permission
// already checked: ENOENT for a missing name comes before EACCES for a
// directory the caller may not write, then the sticky rule.
Status MayDeleteIn(fuse_req_t req, const fs::Caller& who, const fs::Attr& d, uint64_t dir,
                   std::string_view name) {
  Status w = Access(who, d, fs::kMayWrite);
  if (w.ok() && !(d.mode & S_ISVTX)) return Status::OK();
  Result<fs::Attr> victim = PeekEntry(req, dir, name);
  if (!victim.ok()) return victim.status().code() == ENOENT ? Status::OK() : victim.status();
  if (!w.ok()) return w;
  return fs::CheckSticky(d.mode, d.uid, victim->uid, who);
}

}  // namespace

RequestCaller::RequestCaller(fuse_req_t req) : req_(req), checking_(Checking(req)) {
  const fuse_ctx* c = fuse_req_ctx(req);
  caller_.uid = c->uid;
  caller_.gid = c->gid;
  caller_.pid = c->pid;
  caller_.in_group = [this](uint32_t gid) { return InGroup(gid); };
}

bool RequestCaller::InGroup(uint32_t gid) {
  if (!have_groups_) {
    have_groups_ = true;
    std::vector<gid_t> g(32);
    for (;;) {
      int n = fuse_req_getgroups(req_, static_cast<int>(g.size()), g.data());
      if (n < 0) {
        g.clear();  // unknown: only the primary group counts
        break;
      }
      if (static_cast<size_t>(n) <= g.size()) {
        g.resize(static_cast<size_t>(n));
        break;
      }
      g.resize(static_cast<size_t>(n));
    }
    groups_.assign(g.begin(), g.end());
  }
  return std::find(groups_.begin(), groups_.end(), gid) != groups_.end();
}

bool KernelCanDropAllNames() {
  utsname u;
  if (uname(&u) != 0) return false;
  unsigned major = 0, minor = 0;
  if (std::sscanf(u.release, "%u.%u", &major, &minor) != 2) return false;
  return major > 6 || (major == 6 && minor >= 16);
}

Status Check(fuse_req_t req, const fs::Attr& attr, int want) {
  if (!Checking(req)) return Status::OK();
  RequestCaller who(req);
  return Access(who.caller(), attr, want);
}

Status MayLookupControlDir(fuse_req_t req, bool* cacheable) {
  *cacheable = true;
  if (!Checking(req)) return Status::OK();
  Result<fs::Attr> p = Peek(req, FUSE_ROOT_ID);
  if (!p.ok()) return Status::OK();
  *cacheable = EveryoneSearches(*p);
  RequestCaller who(req);
  return Access(who.caller(), *p, fs::kMayExec);
}

Status MayAccess(fuse_req_t req, uint64_t ino, int mask) {
  if (!Checking(req)) return Status::OK();
  KVFS_ASSIGN_OR_RETURN(fs::Attr a, Peek(req, ino));
  int want = 0;
  if (mask & R_OK) want |= fs::kMayRead;
  if (mask & W_OK) want |= fs::kMayWrite;
  if (mask & X_OK) want |= fs::kMayExec;
  RequestCaller who(req);
  return Access(who.caller(), a, want);
}

Status MayCreate(fuse_req_t req, uint64_t parent, bool* cacheable) {
  *cacheable = true;
  if (!Checking(req)) return Status::OK();
  Result<fs::Attr> p = Peek(req, parent);
  if (!p.ok()) return Status::OK();
  *cacheable = EveryoneSearches(*p);
  RequestCaller who(req);
  return Access(who.caller(), *p, fs::kMayWrite | fs::kMayExec);
}

Status MayDelete(fuse_req_t req, uint64_t parent, std::string_view name) {
  if (!Checking(req)) return Status::OK();
  Result<fs::Attr> p = Peek(req, parent);
  if (!p.ok()) return Status::OK();
  RequestCaller rc(req);
  const fs::Caller& who = rc.caller();
  KVFS_RETURN_IF_ERROR(Access(who, *p, fs::kMayExec));
  return MayDeleteIn(req, who, *p, parent, name);
}

Status MayRename(fuse_req_t req, uint64_t parent, std::string_view name, uint64_t new_parent,
                 std::string_view new_name, bool* drop_names) {
  *drop_names = false;
  if (!Checking(req)) return Status::OK();
  Result<fs::Attr> p = Peek(req, parent);
  Result<fs::Attr> np = Peek(req, new_parent);
  if (!p.ok() || !np.ok()) return Status::OK();
  RequestCaller rc(req);
  const fs::Caller& who = rc.caller();
  KVFS_RETURN_IF_ERROR(Access(who, *p, fs::kMayExec));
  KVFS_RETURN_IF_ERROR(Access(who, *np, fs::kMayExec));
  // The source must exist before anything else is said about it.
  Status src = MayDeleteIn(req, who, *p, parent, name);
  if (!src.ok()) {
    Result<fs::Attr> s = PeekEntry(req, parent, name);
    if (!s.ok() && s.status().code() == ENOENT) return Status::OK();  // rename says ENOENT
    return src;
  }
  // The target: write permission on its directory whether it exists or not,
  // and the sticky rule if it exists.
  KVFS_RETURN_IF_ERROR(Access(who, *np, fs::kMayWrite));
  KVFS_RETURN_IF_ERROR(MayDeleteIn(req, who, *np, new_parent, new_name));
  if (parent != new_parent) {
    Result<fs::Attr> s = PeekEntry(req, parent, name);
    if (s.ok() && S_ISDIR(s->mode)) KVFS_RETURN_IF_ERROR(Access(who, *s, fs::kMayWrite));
    *drop_names = EveryoneSearches(*p) && !EveryoneSearches(*np);
  }
  return Status::OK();
}

Status MaySetAttr(fuse_req_t req, uint64_t ino, int to_set, bool with_handle, uint32_t* mode,
                  uint32_t uid, uint32_t gid, bool* narrowed) {
  *narrowed = false;
  if (!Checking(req)) return Status::OK();
  Result<fs::Attr> r = Peek(req, ino);
  if (!r.ok()) return Status::OK();  // the setattr says why
  const fs::Attr& a = *r;
  RequestCaller rc(req);
  const fs::Caller& who = rc.caller();
  const bool root = who.uid == 0;
  const bool owner = root || who.uid == a.uid;
  if (to_set & FUSE_SET_ATTR_UID) {
    if (!root && !(who.uid == a.uid && uid == a.uid)) {
      return Status::Error(EPERM, "chown: only root changes the owner");
    }
  }
  if (to_set & FUSE_SET_ATTR_GID) {
    const bool keeps_owner = !(to_set & FUSE_SET_ATTR_UID) || uid == a.uid;
    if (!root &&
        !(who.uid == a.uid && keeps_owner && (gid == a.gid || fs::CallerInGroup(who, gid)))) {
      return Status::Error(EPERM, "chgrp: not the owner, or not a group of the caller");
    }
  }
  if (to_set & FUSE_SET_ATTR_MODE) {
    const uint32_t now = a.mode & 07777, want = *mode & 07777;
    // The kernel clears setuid/setgid itself on a write, a truncate or a
    // chown by someone else (it computed the mode; no chmod was asked).
    const uint32_t cleared = now & ~want;
    const bool kill_only = want != now && (want & ~now) == 0 &&
                           (cleared & ~static_cast<uint32_t>(S_ISUID | S_ISGID)) == 0;
    if (!owner) {
      if (!kill_only || !Access(who, a, fs::kMayWrite).ok()) {
        return Status::Error(EPERM, "chmod: not the owner");
      }
    } else if (!root && !kill_only && !(to_set & FUSE_SET_ATTR_SIZE)) {
      const uint32_t group = (to_set & FUSE_SET_ATTR_GID) ? gid : a.gid;
      if (!fs::CallerInGroup(who, group)) *mode &= ~static_cast<uint32_t>(S_ISGID);
    }
    *narrowed = S_ISDIR(a.mode) && EveryoneSearches(a) && (*mode & 0111) != 0111;
  }
  const bool atime = to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW);
  const bool mtime = to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW);
  if (atime || mtime) {
    const bool touch = (to_set & FUSE_SET_ATTR_ATIME_NOW) && (to_set & FUSE_SET_ATTR_MTIME_NOW);
    if (!owner) {
      if (!touch) return Status::Error(EPERM, "utimes: not the owner");
      KVFS_RETURN_IF_ERROR(Access(who, a, fs::kMayWrite));
    }
  }
  if ((to_set & FUSE_SET_ATTR_SIZE) && !with_handle) {
    KVFS_RETURN_IF_ERROR(Access(who, a, fs::kMayWrite));
  }
  return Status::OK();
}

Status MayXattr(fuse_req_t req, uint64_t ino, std::string_view name, bool write) {
  if (!Checking(req)) return Status::OK();
  if (name.substr(0, 5) != "user.") return Status::OK();  // the kernel checks trusted.*
  Result<fs::Attr> a = Peek(req, ino);
  if (!a.ok()) return Status::OK();
  RequestCaller rc(req);
  const fs::Caller& who = rc.caller();
  const bool root = who.uid == 0;
  if (!S_ISREG(a->mode) && !S_ISDIR(a->mode)) {
    return write ? Status::Error(EPERM, "user.* attributes") : Status::Error(ENODATA, "");
  }
  if (write && S_ISDIR(a->mode) && (a->mode & S_ISVTX) && !root && who.uid != a->uid) {
    return Status::Error(EPERM, "user.* attributes of a sticky directory: owner only");
  }
  return Access(who, *a, write ? fs::kMayWrite : fs::kMayRead);
}

void DropAllNames(fuse_req_t req) {
  SessionState& s = StateOf(req);
  if (s.session == nullptr) return;
  fuse_out_header out{};
  out.len = sizeof(out);
  out.error = kNotifyIncEpoch;
  out.unique = 0;
  iovec v = {&out, sizeof(out)};
  if (::writev(fuse_session_fd(s.session), &v, 1) < 0) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      spdlog::error("dropping the kernel's cached names (FUSE_NOTIFY_INC_EPOCH): {}",
                    std::strerror(errno));
    }
  }
}

}  // namespace kvfs::fuse::perm
