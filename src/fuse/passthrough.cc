#include "fuse/passthrough.h"

#include <linux/fuse.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "fs/file_memory.h"
#include "fuse/passthrough_abi.h"
#include "fuse/session_state.h"

namespace kvfs::fuse {

namespace abi = passthrough_abi;

namespace {

ssize_t ReadHook(int fd, void* buf, size_t len, void* userdata) {
  return static_cast<SessionState*>(userdata)->passthrough->Read(fd, buf, len);
}

ssize_t WritevHook(int fd, iovec* iov, int count, void* userdata) {
  return static_cast<SessionState*>(userdata)->passthrough->Writev(fd, iov, count);
}

}  // namespace

Passthrough::Passthrough(PassthroughMode mode) : mode_(mode) {
  if (mode_ == PassthroughMode::kOff) {
    why_off_ = "passthrough=off";
  } else if (geteuid() != 0) {
    why_off_ = "needs root (CAP_SYS_ADMIN)";
  }
}

Passthrough::~Passthrough() { fd_->store(-1); }

bool Passthrough::may_activate() const { return mode_ == PassthroughMode::kAuto && geteuid() == 0; }

Status Passthrough::InstallHooks(fuse_session* se) {
  fuse_custom_io io{};
  io.writev = WritevHook;
  io.read = ReadHook;
  int rc = fuse_session_custom_io(se, &io, fuse_session_fd(se));
  if (rc != 0) return Status::Error(rc < 0 ? -rc : EIO, "fuse_session_custom_io");
  return Status::OK();
}

void Passthrough::NoteInitRequest(const void* buf, size_t n) {
  if (n < sizeof(fuse_in_header)) return;
  const auto* in = static_cast<const fuse_in_header*>(buf);
  if (in->opcode != FUSE_INIT) return;
  init_unique_ = in->unique;
  fuse_init_in init{};
  const size_t have = n - sizeof(fuse_in_header);
  std::memcpy(&init, in + 1, std::min(have, sizeof(init)));
  offered_ = init.flags;
  if ((init.flags & FUSE_INIT_EXT) && have >= offsetof(fuse_init_in, flags2) + sizeof(uint32_t)) {
    offered_ |= static_cast<uint64_t>(init.flags2) << 32;
  }
}

void Passthrough::EditInitReply(void* init_out, size_t len, int fd) {
  init_done_.store(true, std::memory_order_relaxed);
  if (!may_activate()) {
    // why_off_ says why since construction
  } else if (!(offered_ & abi::kPassthrough)) {
    why_off_ = "the kernel does not offer FUSE passthrough (needs Linux 6.9+)";
  } else if (len < abi::kMaxStackDepthOffset + sizeof(uint32_t)) {
    why_off_ = "libfuse's INIT reply is too short";
  } else {
    auto* init = static_cast<fuse_init_out*>(init_out);
    if (init->flags & abi::kWritebackCache) {
      why_off_ = "the writeback cache is on";
    } else {
      init->flags |= FUSE_INIT_EXT;
      init->flags2 |= static_cast<uint32_t>(abi::kPassthrough >> 32);
      const uint32_t depth = abi::kMaxStackDepth;
      std::memcpy(static_cast<char*>(init_out) + abi::kMaxStackDepthOffset, &depth, sizeof(depth));
      fd_->store(fd);
      active_.store(true, std::memory_order_release);
    }
  }
  spdlog::info("passthrough: {}", Describe());
}

std::string Passthrough::Describe() const {
  if (active()) return "on (loads of cached files are served by the kernel)";
  return "off (" + why_off_ + ")";
}

ssize_t Passthrough::Read(int fd, void* buf, size_t len) {
  ssize_t n = ::read(fd, buf, len);
  if (n > 0 && !init_done_.load(std::memory_order_relaxed)) {
    NoteInitRequest(buf, static_cast<size_t>(n));
  }
  return n;
}

ssize_t Passthrough::Writev(int fd, iovec* iov, int count) {
  if (!init_done_.load(std::memory_order_relaxed) && count == 2 &&
      iov[0].iov_len >= sizeof(fuse_out_header) && init_unique_ != 0) {
    const auto* out = static_cast<const fuse_out_header*>(iov[0].iov_base);
    if (out->unique == init_unique_ && out->error == 0) {
      fuse_init_out init{};
      const size_t len = std::min(iov[1].iov_len, sizeof(init));
      std::memcpy(&init, iov[1].iov_base, len);
      EditInitReply(&init, len, fd);
      iovec v[2] = {iov[0], {&init, len}};
      return ::writev(fd, v, 2);
    }
  }
  return ::writev(fd, iov, count);
}

bool Passthrough::Export(fs::FileMemory& m) {
  std::shared_ptr<std::atomic<int>> dev = fd_;
  const int id = m.ExportId(
      [&](int memfd) {
        abi::BackingMap map{memfd, 0, 0};
        const int fd = dev->load();
        int rc = fd < 0 ? -1 : ioctl(fd, abi::kBackingOpen, &map);
        if (rc <= 0) {
          const int e = errno;
          if (export_failures_.fetch_add(1) == 0) {
            spdlog::warn("passthrough: the kernel refused a backing file ({}); such opens are "
                         "served through READ replies",
                         std::strerror(e));
          }
          return -1;
        }
        exports_.fetch_add(1, std::memory_order_relaxed);
        return rc;
      },
      [dev](int id) {
        const int fd = dev->load();
        uint32_t v = static_cast<uint32_t>(id);
        if (fd >= 0) (void)ioctl(fd, abi::kBackingClose, &v);
      });
  return id > 0;
}

int Passthrough::ReplyOpen(fuse_req_t req, uint64_t fh, fs::FileMemory& m, int flags) {
  abi::OpenOut out{};
  out.fh = fh;
  out.open_flags = abi::kFopenPassthrough;
  // close(2) of a read-only open has nothing to write out.
  if ((flags & O_ACCMODE) == O_RDONLY) out.open_flags |= abi::kFopenNoflush;
  out.backing_id = m.export_id();
  iovec v{&out, sizeof(out)};
  return fuse_reply_iov(req, &v, 1);
}

}  // namespace kvfs::fuse
