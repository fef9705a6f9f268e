#include "daemon/option_spec.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace kvfs::daemon {

Status BadValue(std::string_view name, std::string_view text, std::string_view why) {
  std::string msg(name);
  msg += "=";
  msg += text;
  msg += ": ";
  msg += why;
  return Status::Error(EINVAL, msg);
}

Result<std::string> AbsolutePath(std::string_view path) {
  if (path.empty()) return Status::Error(EINVAL, "empty path");
  std::error_code ec;
  auto abs = std::filesystem::absolute(std::filesystem::path(path), ec);
  if (ec) return Status::Error(ec.value(), ec.message());
  return abs.lexically_normal().string();
}

std::string RangeText(Bounds b) {
  if (b.max != Bounds{}.max) return std::to_string(b.min) + " to " + std::to_string(b.max);
  if (b.min != 0) return "at least " + std::to_string(b.min);
  return "";
}

std::string NumberText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Result<uint64_t> ParseUnsigned(std::string_view name, std::optional<std::string_view> text,
                               Bounds bounds) {
  const std::string t(text.value_or(""));
  const std::string range = RangeText(bounds);
  // Digits only: strtoull would take "-1" (as a huge number) and " 1".
  if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos) {
    return BadValue(name, t, "not a whole number" + (range.empty() ? "" : " (" + range + ")"));
  }
  errno = 0;
  unsigned long long v = std::strtoull(t.c_str(), nullptr, 10);
  if (errno != 0 || v < bounds.min || v > bounds.max) {
    return BadValue(name, t, "must be " + (range.empty() ? "at most " + std::to_string(bounds.max)
                                                         : range));
  }
  return static_cast<uint64_t>(v);
}

Result<double> ParseNumber(std::string_view name, std::optional<std::string_view> text,
                           double min) {
  const std::string t(text.value_or(""));
  char* end = nullptr;
  errno = 0;
  double v = t.empty() ? 0 : std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || errno != 0 || !std::isfinite(v)) {
    return BadValue(name, t, "not a number");
  }
  if (v < min) {
    return BadValue(name, t, min == 0 ? "must not be negative" : "must be at least " +
                                                                     NumberText(min));
  }
  return v;
}

MountOption UnsignedWith(std::string name, std::string value, Bounds bounds,
                         std::function<uint64_t(const DaemonOptions&)> get,
                         std::function<void(DaemonOptions&, uint64_t)> set, std::string help) {
  MountOption o;
  o.kind = OptionKind::kUnsigned;
  o.value = std::move(value);
  o.help = std::move(help);
  o.range = RangeText(bounds);
  o.set = [name, bounds, set](DaemonOptions& d, std::optional<std::string_view> text) -> Status {
    KVFS_ASSIGN_OR_RETURN(uint64_t v, ParseUnsigned(name, text, bounds));
    set(d, v);
    return Status::OK();
  };
  o.get = [get](const DaemonOptions& d) { return std::to_string(get(d)); };
  o.name = std::move(name);
  return o;
}

}  // namespace kvfs::daemon
