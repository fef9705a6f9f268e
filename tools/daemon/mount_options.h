// The kvfs daemon's -o options: one table (mount_options.cc) from which the
// usage text, `kvfs --options-json` and the checks of each value come. An
// option's default is the default of the library struct that owns it
// (fs::FileSystemOptions, fuse::MountOptions, volume::VolumeOptions, or the
// daemon's own parts below), read back, never written again.
//
// Adding an option: a member (with its default) in the struct that owns it,
// one entry in the table, and a line in man/kvfs.8 and docs/operations.md
// (tests/docs/check_docs.py compares names, defaults and ranges).
//
// Thread safety: everything here runs on main's thread before any other
// starts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "daemon/daemon_log.h"
#include "daemon/fault_hooks.h"
#include "daemon/option_spec.h"
#include "fs/file_system.h"
#include "fuse/daemon.h"
#include "volume/volume.h"

namespace kvfs::daemon {

// Everything -o sets, in the structs that take it.
struct DaemonOptions {
  fs::FileSystemOptions fs;
  fuse::MountOptions mount;
  volume::VolumeOptions volume;
  LogOptions log;
  FaultOptions faults;
  // A volume still held by a daemon that is ending is waited for this long
  // before the mount fails with "volume is in use".
  unsigned busy_wait_s = 30;
};

// Every option, in the order the usage text lists them.
const std::vector<MountOption>& MountOptionTable();

// The option named `name`, or null.
const MountOption* FindMountOption(std::string_view name);

// The "kvfs options (-o):" lines of the usage: name=VALUE, help, and
// "(default; range)", wrapped to 80 columns.
std::string MountOptionsUsage();

// The table as JSON: [{"name", "kind", "value", "default", "range",
// "help"}...], defaults read from a default-made DaemonOptions.
std::string MountOptionsJson();

// Checks that span options (evict_low below evict_high) and fills in what
// follows from others (a read-only mount makes the file system read-only
// and the volume's lock shared). EINVAL with a message naming the options.
Status FinishMountOptions(DaemonOptions& o);

}  // namespace kvfs::daemon
