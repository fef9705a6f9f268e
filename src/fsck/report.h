// Report: everything one fsck run found and did, and its fsck(8) exit code.
//
// Exit code bits (fsck(8)), OR-ed together:
//   1  errors were found and all of them corrected (-y)
//   4  errors were left uncorrected (-n, or not repairable)
//   8  operational error: fsck could not check (a device or the index could
//      not be opened or read, the devices given are not one whole volume, the
//      index is missing or belongs to another volume, the volume is mounted
//      and repair was asked for, a repair write failed)
// 0 means clean; 16 (usage) is the CLI's. Findings of Severity::kInfo do not
// count.
//
// Thread safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "fsck/finding.h"

namespace kvfs::fsck {

inline constexpr int kExitClean = 0;
inline constexpr int kExitCorrected = 1;
inline constexpr int kExitUncorrected = 4;
inline constexpr int kExitOperational = 8;
inline constexpr int kExitUsage = 16;

struct Stats {
  uint64_t inodes = 0;
  uint64_t directories = 0;
  uint64_t files = 0;
  uint64_t entries = 0;
  uint64_t orphans = 0;
  uint64_t extents = 0;
  uint64_t data_bytes = 0;      // bytes referenced by extents
  // Per device index: bytes referenced by extents on it, and files with at
  // least one extent on it (those a failure of that device would hit).
  std::vector<uint64_t> device_bytes;
  std::vector<uint64_t> device_files;
  uint64_t verified_bytes = 0;  // bytes read by --verify-data
  double metadata_seconds = 0;  // opening + index checks, of which:
  double open_seconds = 0;      //   devices, superblocks, index open
  double load_seconds = 0;      //   index scans into memory
  double verify_seconds = 0;    // --verify-data phase
  double repair_seconds = 0;
};

struct Report {
  Status error;          // operational error (exit bit 8); OK otherwise
  bool repair = false;   // -y
  bool mounted = false;  // checked read-only while the volume is in use
  std::string volume_uuid;
  std::string index_dir;
  std::vector<std::string> devices;
  std::vector<std::string> notes;  // informational lines ("volume is mounted...")
  std::vector<Finding> findings;
  Stats stats;

  // Error findings, and of those the ones repaired.
  size_t errors() const;
  size_t repaired() const;
  int ExitCode() const;
  // The report as one JSON object:
  //   exit_code, mode ("check" | "repair"), mounted, volume_uuid, index_dir,
  //   devices [..], error (null | {errno, message}), notes [..],
  //   findings [{kind, severity ("error" | "info"), ino (null | n), path,
  //              problem, fix (null | text), repaired, line}],
  //   errors, repaired, stats {inodes, directories, files, entries, orphans,
  //   extents, data_bytes, verified_bytes, *_seconds,
  //   per_device [{device, bytes, files}]}.
  // Names that are not UTF-8 have their bad bytes replaced (U+FFFD).
  std::string ToJson() const;
  // A one-line summary for the end of the text output.
  std::string Summary() const;
};

}  // namespace kvfs::fsck
