#include "fuse/tmpfile.h"

#include <linux/fuse.h>

namespace kvfs::fuse {

static_assert(FUSE_TMPFILE == 51);
static_assert(sizeof(kTmpfileName) == 2);

bool TmpfileAsCreate(fuse_buf& buf) {
  if (buf.size < sizeof(fuse_in_header)) return false;
  auto* in = static_cast<fuse_in_header*>(buf.mem);
  if (in->opcode != FUSE_TMPFILE) return false;
  const size_t name_at = sizeof(fuse_in_header) + sizeof(fuse_create_in);
  // The name is "/" (vfs_tmpfile's dentry); written again all the same, so
  // the mark is ours, not an accident of the kernel's placeholder.
  if (buf.size < name_at + sizeof(kTmpfileName) || in->len < name_at + sizeof(kTmpfileName)) {
    return false;
  }
  std::memcpy(static_cast<char*>(buf.mem) + name_at, kTmpfileName, sizeof(kTmpfileName));
  in->opcode = FUSE_CREATE;
  return true;
}

}  // namespace kvfs::fuse
