#include "fuse/permissions.h"

#include <linux/fuse.h>
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
  RequestCaller who(req);
  if (who.check() == nullptr) return Status::OK();
  return fs::CheckAccess(attr.mode, attr.uid, attr.gid, who.caller(), want);
}

Status MayLookupControlDir(fuse_req_t req, bool* cacheable) {
  *cacheable = true;
  RequestCaller who(req);
  if (who.check() == nullptr) return Status::OK();
  return NoThrow([&] {
    return StateOf(req).fs->Access(FUSE_ROOT_ID, fs::kMayExec, who.check(), cacheable);
  });
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
