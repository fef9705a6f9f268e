// Directories and the volume: opendir, readdir, releasedir, fsyncdir,
// statfs.
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cstring>
#include <vector>

#include "fuse/ops.h"
#include "fuse/permissions.h"
#include "fuse/reply.h"

namespace kvfs::fuse::ops {

void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  perm::RequestCaller caller(req);
  Result<uint64_t> r = NoThrow([&] { return s.fs->OpenDir(ino, fi->flags, caller.check()); });
  if (!r.ok()) {
    ReplyStatus(req, r.status(), "opendir");
    return;
  }
  fi->fh = *r;
  if (fuse_reply_open(req, fi) == -ENOENT) {
    // Interrupted opendir(3): no releasedir will come for this handle.
    Status st = NoThrowVoid([&] { s.fs->ReleaseDir(*r); });
    if (!st.ok()) spdlog::error("opendir: undoing an interrupted open: {}", st.ToString());
  }
}

void ReadDir(fuse_req_t req, fuse_ino_t /*ino*/, size_t size, off_t off, fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  std::vector<char> buf;
  size_t used = 0;
  Status st = NoThrow([&]() -> Status {
    buf.resize(size);
    char cname[256];  // fuse_add_direntry wants a NUL-terminated name
    std::string long_name;
    return s.fs->ReadDir(
        fi->fh, static_cast<uint64_t>(off),
        [&](std::string_view name, uint64_t ino, uint32_t mode, uint64_t next_off) {
          const char* n = cname;
          if (name.size() < sizeof(cname)) {
            std::memcpy(cname, name.data(), name.size());
            cname[name.size()] = '\0';
          } else {
            long_name.assign(name);
            n = long_name.c_str();
          }
          struct stat st;
          std::memset(&st, 0, sizeof(st));
          st.st_ino = ino;
          st.st_mode = mode;
          size_t need = fuse_add_direntry(req, nullptr, 0, n, nullptr, 0);
          if (used + need > size) return false;  // the kernel asks again from next_off
          fuse_add_direntry(req, buf.data() + used, size - used, n, &st,
                            static_cast<off_t>(next_off));
          used += need;
          return true;
        });
  });
  if (!st.ok() && used == 0) {
    ReplyStatus(req, st, "readdir");
    return;
  }
  if (!st.ok()) {
    // The entries gathered are valid; the error comes back when the kernel
    // asks for what follows them.
    spdlog::debug("readdir: {} (returning the {} bytes read so far)", st.ToString(), used);
  }
  fuse_reply_buf(req, buf.data(), used);
}

void ReleaseDir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  SessionState& s = StateOf(req);
  Status st = NoThrowVoid([&] {
    s.registry.DropOwner(OwnerFile{fi->fh, /*dir=*/true});  // the ioctl fd's last close
    s.fs->ReleaseDir(fi->fh);
  });
  if (!st.ok()) spdlog::error("releasedir of handle {}: {}", fi->fh, st.ToString());
  fuse_reply_err(req, 0);
}

void FsyncDir(fuse_req_t req, fuse_ino_t /*ino*/, int /*datasync*/, fuse_file_info* /*fi*/) {
  // Directory changes are ordered commits of the one index: writing out and
  // committing everything queued covers this directory's entries.
  SessionState& s = StateOf(req);
  ReplyStatus(req, NoThrow([&] { return s.fs->Sync(); }), "fsyncdir");
}

void StatFs(fuse_req_t req, fuse_ino_t /*ino*/) {
  SessionState& s = StateOf(req);
  fs::FsStats stats;
  Status st = NoThrowVoid([&] { stats = s.fs->StatFs(); });
  if (!st.ok()) {
    ReplyStatus(req, st, "statfs");
    return;
  }
  struct statvfs v = ToStatvfs(stats);
  fuse_reply_statfs(req, &v);
}

}  // namespace kvfs::fuse::ops
