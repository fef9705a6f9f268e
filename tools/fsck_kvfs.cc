// fsck.kvfs: check and repair a kvfs volume offline (fsck(8) conventions).
//
//   fsck.kvfs [-n | -y] [--index DIR] [--verify-data] [--json] DEVICE...
//
// -n checks only (works on a mounted volume, read-only); -y repairs without
// asking. With neither, fsck.kvfs checks only, like -n, and says that -y
// repairs: it never asks, so that a script or a boot sequence cannot hang on
// a prompt. Exit codes, OR-ed: 0 clean, 1 errors corrected, 4 errors left
// uncorrected, 8 operational error, 16 usage error (src/fsck/report.h).
//
// Output: one line per finding on stdout, then a summary; with --json one
// JSON object on stdout instead. Operational errors also go to stderr.
// Progress (percent, MB/s, ETA) is drawn on stderr only when it is a TTY.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "fsck/checker.h"
#include "fsck/progress.h"

namespace {

using kvfs::fsck::kExitUsage;

}  // namespace

int main(int argc, char** argv) {
  // RocksDB's messages (the index logs through spdlog) go to stderr, never
  // into what this prints on stdout.
  spdlog::set_default_logger(spdlog::stderr_color_st("rocksdb"));
  CLI::App app{"Check and repair a kvfs volume (devices or image files and its index)."};
  app.name("fsck.kvfs");
  app.footer(
      "Without -n or -y, fsck.kvfs checks only (like -n) and never asks: -y is required to "
      "repair.\nExit status (OR-ed): 0 clean, 1 errors corrected, 4 errors left uncorrected "
      "(also: a damaged superblock), 8 operational error (a device or the index cannot be "
      "opened, devices missing, index missing or foreign, volume mounted while repairing), "
      "16 usage error.");
  bool check_only = false, repair = false, json = false;
  kvfs::fsck::CheckOptions opt;
  auto* n = app.add_flag("-n,--no-repair", check_only,
                         "Check only; open everything read-only (also on a mounted volume)");
  auto* y = app.add_flag("-y,--yes", repair, "Repair every problem found, without asking");
  n->excludes(y);
  app.add_option("--index", opt.index_dir,
                 "Index directory (default for an image file: IMAGE.index; required for a "
                 "block device)");
  app.add_flag("--verify-data", opt.verify_data,
               "Read every extent and compare its crc32c; list damaged files by path");
  app.add_flag("--json", json, "Print the report as one JSON object");
  app.add_option("--read-size", opt.verify.read_bytes,
                 "--verify-data: largest read request (bytes; K, M suffixes)")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--command-size", opt.verify.command_bytes,
                 "--verify-data: largest device command a read is split into")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--inflight", opt.verify.inflight_reads,
                 "--verify-data: read requests in flight")
      ->check(CLI::Range(1, 4096));
  std::vector<std::string> devices;
  app.add_option("DEVICE", devices, "Block devices or image files of the volume")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help (rc 0) or the error
    return rc == 0 ? 0 : kExitUsage;
  }
  opt.devices = devices;
  opt.repair = repair;

  std::unique_ptr<kvfs::fsck::ProgressMeter> meter;
  if (::isatty(STDERR_FILENO)) {
    meter = std::make_unique<kvfs::fsck::ProgressMeter>(stderr);
    opt.progress = meter.get();
  }
  kvfs::fsck::Report r = kvfs::fsck::Check(opt);
  const int rc = r.ExitCode();

  if (!r.error.ok())
    std::fprintf(stderr, "fsck.kvfs: cannot check: %s\n", r.error.ToString().c_str());
  if (json) {
    std::printf("%s\n", r.ToJson().c_str());
    return rc;
  }
  for (const std::string& note : r.notes) std::printf("fsck.kvfs: note: %s\n", note.c_str());
  for (const kvfs::fsck::Finding& f : r.findings) std::printf("%s\n", f.ToLine().c_str());
  if (r.error.ok() && !r.volume_uuid.empty()) {
    std::printf("kvfs volume %s: %s\n", r.volume_uuid.c_str(), r.Summary().c_str());
  }
  if (!repair && r.errors() > r.repaired()) {
    bool fixable = false;
    for (const auto& f : r.findings) fixable |= f.repairable() && !f.repaired;
    if (fixable && !r.mounted) std::printf("fsck.kvfs: run with -y to repair\n");
    if (fixable && r.mounted)
      std::printf("fsck.kvfs: unmount the volume and run with -y to repair\n");
  }
  (void)check_only;  // checking only is the default; -n makes it explicit and excludes -y
  return rc;
}
