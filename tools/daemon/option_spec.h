// MountOption: one -o option of the kvfs daemon, stated once in the table of
// tools/daemon/mount_options.cc: its name, the value it takes, its range,
// its help, and where a value lands in the options struct that owns it. The
// default is never written in the table: it is read back from a
// default-made struct, so the usage text, `kvfs --options-json` and the
// docs check (tests/docs/check_docs.py) say what the library does.
//
//   Unsigned("dirty_mb", "N", {.min = 1}, kMiB,
//            [](auto& o) -> auto& { return o.volume.engine.staging_pool_bytes; },
//            "memory for staged (not yet written) data, MiB")
//
// A `field` accessor is a generic lambda returning a reference to the
// member, so that one accessor serves both set (non-const) and get (const).
//
// Thread safety: the table is built once and read only.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kvfs::daemon {

struct DaemonOptions;  // tools/daemon/mount_options.h

enum class OptionKind {
  kFlag,        // name alone: sets one value
  kUnsigned,    // name=N, a whole number in a range
  kNumber,      // name=S, a number (fractions allowed) in a range
  kChoice,      // name=WORD, one of a few words
  kText,        // name=TEXT
  kFlagOrText,  // name alone, or name=TEXT
};

// An unsigned option's range, in the unit the user writes.
struct Bounds {
  uint64_t min = 0;
  uint64_t max = std::numeric_limits<uint32_t>::max();
};

struct MountOption {
  std::string name;
  OptionKind kind = OptionKind::kFlag;
  std::string value;  // after '=' in the usage ("N", "off|lru"); empty for a flag
  std::string help;
  // The stated range ("1 to 16", "at least 1"), empty when any value of the
  // type is taken.
  std::string range;
  // Also handed on to libfuse and the kernel (ro, rw).
  bool to_libfuse = false;
  // Applies what -o gave: the text after '=', or nullopt for the name
  // alone. EINVAL with a message naming the option for a bad value.
  std::function<Status(DaemonOptions&, std::optional<std::string_view>)> set;
  // The value as -o writes it; for a flag "on" when it is in effect, else
  // "off". Empty: none (the library derives one, e.g. index beside the image).
  std::function<std::string(const DaemonOptions&)> get;
};

// --- Building entries (used by the table). ------------------------------

inline constexpr uint64_t kMiB = 1ull << 20;

// The value given is `scale` units of the member: member = value * scale.
template <typename Field>
MountOption Unsigned(std::string name, std::string value, Bounds bounds, uint64_t scale,
                     Field field, std::string help);
// As Unsigned, with the conversion written out (a member that is not a
// plain number, such as a std::chrono duration).
MountOption UnsignedWith(std::string name, std::string value, Bounds bounds,
                         std::function<uint64_t(const DaemonOptions&)> get,
                         std::function<void(DaemonOptions&, uint64_t)> set, std::string help);
// A number of seconds, at least `min` (a double member).
template <typename Field>
MountOption Number(std::string name, std::string value, double min, Field field,
                   std::string help);
// One of `names` (the first name of a value is how it is shown); `aliases`
// are accepted too and never shown.
template <typename T, typename Field>
MountOption Choice(std::string name, std::vector<std::pair<std::string, T>> names, Field field,
                   std::string help, std::vector<std::pair<std::string, T>> aliases = {});
// The name alone sets the member to `value`.
template <typename T, typename Field>
MountOption Flag(std::string name, T value, Field field, std::string help);
// The name alone, or name=TEXT, into a std::optional<std::string> member
// (the name alone gives "").
template <typename Field>
MountOption FlagOrText(std::string name, std::string value, Field field, std::string help);
// Free text into a std::string member; `check` (optional) may refuse it or
// rewrite it (e.g. make a path absolute).
template <typename Field>
MountOption Text(std::string name, std::string value, Field field, std::string help,
                 std::function<Result<std::string>(std::string_view)> check = nullptr);

// --- Parsing values (the messages name the option). ---------------------

// "NAME=TEXT: why" as an EINVAL Status.
Status BadValue(std::string_view name, std::string_view text, std::string_view why);
// A whole number in `bounds` (decimal).
Result<uint64_t> ParseUnsigned(std::string_view name, std::optional<std::string_view> text,
                               Bounds bounds);
// A finite number, at least `min`.
Result<double> ParseNumber(std::string_view name, std::optional<std::string_view> text,
                           double min);
// `path` made absolute against the current directory (the daemon changes
// to / once in the background). EINVAL for an empty path.
Result<std::string> AbsolutePath(std::string_view path);
// "1 to 16", "at least 1", or "" for the whole range of the type.
std::string RangeText(Bounds bounds);
// A double shown as -o would take it: "10", "0.5".
std::string NumberText(double v);

// ---------------------------------------------------------------------------
// Implementation details follow.

template <typename Field>
MountOption Unsigned(std::string name, std::string value, Bounds bounds, uint64_t scale,
                     Field field, std::string help) {
  return UnsignedWith(
      std::move(name), std::move(value), bounds,
      [field, scale](const DaemonOptions& o) { return static_cast<uint64_t>(field(o)) / scale; },
      [field, scale](DaemonOptions& o, uint64_t v) {
        auto& member = field(o);
        member = static_cast<std::remove_reference_t<decltype(member)>>(v * scale);
      },
      std::move(help));
}

template <typename Field>
MountOption Number(std::string name, std::string value, double min, Field field,
                   std::string help) {
  MountOption o;
  o.kind = OptionKind::kNumber;
  o.value = std::move(value);
  o.help = std::move(help);
  // Not negative goes without saying for a time.
  o.range = min == 0 ? "" : "at least " + NumberText(min);
  o.set = [name, min, field](DaemonOptions& d, std::optional<std::string_view> text) -> Status {
    KVFS_ASSIGN_OR_RETURN(double v, ParseNumber(name, text, min));
    field(d) = v;
    return Status::OK();
  };
  o.get = [field](const DaemonOptions& d) { return NumberText(field(d)); };
  o.name = std::move(name);
  return o;
}

template <typename T, typename Field>
MountOption Choice(std::string name, std::vector<std::pair<std::string, T>> names, Field field,
                   std::string help, std::vector<std::pair<std::string, T>> aliases) {
  MountOption o;
  o.kind = OptionKind::kChoice;
  std::string list;
  for (const auto& [word, v] : names) {
    o.value += (o.value.empty() ? "" : "|") + word;
    list += (list.empty() ? "" : ", ") + word;
  }
  o.help = std::move(help);
  o.set = [name, names, aliases, list, field](DaemonOptions& d,
                                              std::optional<std::string_view> text) -> Status {
    for (const auto* words : {&names, &aliases}) {
      for (const auto& [word, v] : *words) {
        if (text && *text == word) {
          field(d) = v;
          return Status::OK();
        }
      }
    }
    return BadValue(name, text.value_or(""), "not one of " + list);
  };
  o.get = [names, field](const DaemonOptions& d) -> std::string {
    for (const auto& [word, v] : names) {
      if (field(d) == v) return word;
    }
    return "";
  };
  o.name = std::move(name);
  return o;
}

template <typename T, typename Field>
MountOption Flag(std::string name, T value, Field field, std::string help) {
  MountOption o;
  o.name = std::move(name);
  o.kind = OptionKind::kFlag;
  o.help = std::move(help);
  o.set = [value, field](DaemonOptions& d, std::optional<std::string_view>) {
    field(d) = value;
    return Status::OK();
  };
  o.get = [value, field](const DaemonOptions& d) -> std::string {
    return field(d) == value ? "on" : "off";
  };
  return o;
}

template <typename Field>
MountOption Text(std::string name, std::string value, Field field, std::string help,
                 std::function<Result<std::string>(std::string_view)> check) {
  MountOption o;
  o.kind = OptionKind::kText;
  o.value = std::move(value);
  o.help = std::move(help);
  o.set = [name, field, check](DaemonOptions& d, std::optional<std::string_view> text) -> Status {
    std::string v(text.value_or(""));
    if (check) {
      auto checked = check(v);
      if (!checked.ok()) return BadValue(name, v, checked.status().context());
      v = std::move(checked).value();
    }
    field(d) = std::move(v);
    return Status::OK();
  };
  o.get = [field](const DaemonOptions& d) -> std::string { return field(d); };
  o.name = std::move(name);
  return o;
}

template <typename Field>
MountOption FlagOrText(std::string name, std::string value, Field field, std::string help) {
  MountOption o;
  o.name = std::move(name);
  o.kind = OptionKind::kFlagOrText;
  o.value = std::move(value);
  o.help = std::move(help);
  o.set = [field](DaemonOptions& d, std::optional<std::string_view> text) {
    field(d) = std::string(text.value_or(""));
    return Status::OK();
  };
  o.get = [field](const DaemonOptions& d) -> std::string { return field(d) ? "on" : "off"; };
  return o;
}

}  // namespace kvfs::daemon
