// mkfs.kvfs: format devices (or image files) as a kvfs volume and create its
// index. See man/mkfs.kvfs.8.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "volume/format_volume.h"

int main(int argc, char** argv) {
  // RocksDB's messages (the index logs through spdlog) go to stderr, never
  // into what this prints on stdout.
  spdlog::set_default_logger(spdlog::stderr_color_st("rocksdb"));
  CLI::App app{"Format devices or image files as a kvfs volume and create its RocksDB index."};
  app.name("mkfs.kvfs");
  std::vector<std::string> devices;
  kvfs::volume::FormatOptions opt;
  bool quiet = false;
  std::string add;
  app.add_flag("-f,--force", opt.force,
               "Overwrite an existing kvfs volume, filesystem signature or index");
  app.add_option("--index", opt.index_dir,
                 "Index directory (default for an image file: IMAGE.index; required for a "
                 "block device)");
  app.add_option("--size", opt.size_bytes,
                 "Create or extend image files to this size (bytes; K, M, G, T suffixes)")
      ->transform(CLI::AsSizeValue(false));
  app.add_flag("-q,--quiet", quiet, "Print nothing on success");
  app.add_option("--add", add,
                 "Add this device (or image file) to the unmounted volume of DEVICE... (all of "
                 "its devices); its data is kept");
  app.add_option("DEVICE", devices, "Block devices or image files of the volume")->required();
  CLI11_PARSE(app, argc, argv);

  opt.root_uid = getuid();
  opt.root_gid = getgid();
  if (!add.empty()) {
    auto a = kvfs::volume::AddDevice(devices, add, opt);
    if (!a.ok()) {
      std::fprintf(stderr, "mkfs.kvfs: --add %s: %s\n", add.c_str(), a.status().ToString().c_str());
      return 1;
    }
    if (!quiet) {
      std::printf("%s added as device %u, %.2f GiB of data space\n", add.c_str(), a->device_index,
                  static_cast<double>(a->data_bytes) / (1ull << 30));
    }
    return 0;
  }
  auto r = kvfs::volume::FormatVolume(devices, opt);
  if (!r.ok()) {
    std::fprintf(stderr, "mkfs.kvfs: %s\n", r.status().ToString().c_str());
    return 1;
  }
  if (!quiet) {
    std::printf("kvfs volume %s on %zu device(s), %.2f GiB of data space\nindex %s (%s)\n",
                r->volume_uuid.ToString().c_str(), devices.size(),
                static_cast<double>(r->data_bytes) / (1ull << 30), r->index_dir.c_str(),
                r->index_uuid.ToString().c_str());
  }
  return 0;
}
