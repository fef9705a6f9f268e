// The op table's one routing step: a request for the control directory
// (by inode number, or by the name `.kvfs` in the root: fuse/control.h)
// goes to control::*, a namespace change that would touch it is refused,
// and everything else goes to the ops::* handlers (fuse/ops.h), which
// therefore never see a control inode. Both transports dispatch through
// this one table.
//
// Implementation detail of fuse/daemon.cc (Operations()).
#pragma once

#include <fuse_lowlevel.h>

namespace kvfs::fuse {

// Sets every request handler of `op` (not init): routed as above.
void SetHandlers(fuse_lowlevel_ops& op);

}  // namespace kvfs::fuse
