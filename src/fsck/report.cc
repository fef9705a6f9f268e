#include "fsck/report.h"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace kvfs::fsck {

size_t Report::errors() const {
  size_t n = 0;
  for (const Finding& f : findings) n += f.severity == Severity::kError;
  return n;
}

size_t Report::repaired() const {
  size_t n = 0;
  for (const Finding& f : findings) n += f.severity == Severity::kError && f.repaired;
  return n;
}

int Report::ExitCode() const {
  int code = kExitClean;
  if (!error.ok()) code |= kExitOperational;
  for (const Finding& f : findings) {
    if (f.severity != Severity::kError) continue;
    code |= f.repaired ? kExitCorrected : kExitUncorrected;
  }
  return code;
}

std::string Report::ToJson() const {
  nlohmann::json j;
  j["exit_code"] = ExitCode();
  j["mode"] = repair ? "repair" : "check";
  j["mounted"] = mounted;
  j["volume_uuid"] = volume_uuid;
  j["index_dir"] = index_dir;
  j["devices"] = devices;
  if (!error.ok()) {
    j["error"] = {{"errno", error.code()}, {"message", error.ToString()}};
  } else {
    j["error"] = nullptr;
  }
  j["notes"] = notes;
  nlohmann::json fs = nlohmann::json::array();
  for (const Finding& f : findings) {
    nlohmann::json o;
    o["kind"] = std::string(KindName(f.kind));
    o["severity"] = f.severity == Severity::kError ? "error" : "info";
    if (f.ino != 0) {
      o["ino"] = f.ino;
    } else {
      o["ino"] = nullptr;
    }
    o["path"] = f.path;
    o["problem"] = f.problem;
    o["fix"] = f.fix.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.fix);
    o["repaired"] = f.repaired;
    o["line"] = f.ToLine();
    fs.push_back(std::move(o));
  }
  j["findings"] = std::move(fs);
  j["errors"] = errors();
  j["repaired"] = repaired();
  j["stats"] = {
      {"inodes", stats.inodes},
      {"directories", stats.directories},
      {"files", stats.files},
      {"entries", stats.entries},
      {"orphans", stats.orphans},
      {"extents", stats.extents},
      {"data_bytes", stats.data_bytes},
      {"verified_bytes", stats.verified_bytes},
      {"metadata_seconds", stats.metadata_seconds},
      {"open_seconds", stats.open_seconds},
      {"load_seconds", stats.load_seconds},
      {"verify_seconds", stats.verify_seconds},
      {"repair_seconds", stats.repair_seconds},
  };
  nlohmann::json per_device = nlohmann::json::array();
  for (size_t d = 0; d < stats.device_bytes.size(); ++d) {
    per_device.push_back({{"device", d},
                          {"bytes", stats.device_bytes[d]},
                          {"files", d < stats.device_files.size() ? stats.device_files[d] : 0}});
  }
  j["stats"]["per_device"] = std::move(per_device);
  // Invalid UTF-8 in names (they are arbitrary bytes) must not abort the
  // dump: replace it.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string Report::Summary() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%llu directories, %llu files (%llu orphaned), %llu extents, %.2f GiB; "
                "%zu error(s), %zu repaired; metadata %.2f s",
                static_cast<unsigned long long>(stats.directories),
                static_cast<unsigned long long>(stats.files),
                static_cast<unsigned long long>(stats.orphans),
                static_cast<unsigned long long>(stats.extents),
                static_cast<double>(stats.data_bytes) / (1ull << 30), errors(), repaired(),
                stats.metadata_seconds);
  std::string s = buf;
  if (stats.verified_bytes > 0 || stats.verify_seconds > 0) {
    const double mbs = stats.verify_seconds > 0
                           ? static_cast<double>(stats.verified_bytes) / 1e6 / stats.verify_seconds
                           : 0;
    std::snprintf(buf, sizeof buf, ", data %.2f GiB verified in %.2f s (%.0f MB/s)",
                  static_cast<double>(stats.verified_bytes) / (1ull << 30), stats.verify_seconds,
                  mbs);
    s += buf;
  }
  return s;
}

}  // namespace kvfs::fsck
