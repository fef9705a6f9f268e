// The daemon's command line,
//
//   kvfs [-f] [-d] [-o OPTION[,OPTION...]] DEVICE... MOUNTPOINT
//
// read with libfuse's fuse_opt_parse (which splits -o at commas and takes
// the options mount(8) hands over) against the option table
// (daemon/mount_options.h).
//
// Thread safety: main's thread, before any other starts.
#pragma once

#include <fuse_opt.h>

#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/mount_options.h"

namespace kvfs::daemon {

struct CommandLine {
  DaemonOptions options;               // what -o set; the rest at defaults
  std::vector<std::string> positional;  // DEVICE... MOUNTPOINT
  bool foreground = false;             // -f, -d, -o debug
  bool show_help = false;              // -h, --help
  bool show_version = false;           // -V, --version
  bool show_json = false;              // --options-json
};

// Parses `args` and takes kvfs's options out of it, leaving what is for
// libfuse and the kernel (its own options; ro, rw and debug, which kvfs
// reads too) for fuse::Mount::Create. Options of fstab that mean nothing
// to kvfs and that libfuse would refuse (lazytime, nodiratime...) are
// dropped. EINVAL with the first bad value's message ("dirty_mb=0: must be
// at least 1"); FinishMountOptions() is not run.
Result<CommandLine> ParseCommandLine(fuse_args* args);

// The usage text: the synopsis, the daemon's flags, then every -o option
// with its help, default and range.
std::string Usage();

}  // namespace kvfs::daemon
