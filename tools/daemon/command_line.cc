#include "daemon/command_line.h"

#include <cstring>
#include <iterator>
#include <optional>
#include <string_view>

namespace kvfs::daemon {
namespace {

constexpr const char* kUsageHead =
    "usage: kvfs [-f] [-d] [-o OPTION[,OPTION...]] DEVICE... MOUNTPOINT\n"
    "\n"
    "Mounts the kvfs volume on DEVICE... (block devices or image files made by\n"
    "mkfs.kvfs) at MOUNTPOINT.\n"
    "\n"
    "  -f                    stay in the foreground\n"
    "  -d                    FUSE debug output (implies -f)\n"
    "  -h, --help            this text, then libfuse's options\n"
    "  -V, --version         versions of kvfs and libfuse\n"
    "  --options-json        the kvfs options below as JSON (defaults, ranges)\n"
    "\n"
    "kvfs options (-o):\n";
constexpr const char* kUsageTail =
    "\n"
    "Other -o options go to libfuse and the kernel (see below with -h).\n";

struct Parsed {
  CommandLine line;
  Status error;  // of the first bad -o value
};

enum Key { kKeyForeground, kKeyDebug, kKeyHelp, kKeyVersion, kKeyJson,
           kKeyTable };  // kKeyTable + i: MountOptionTable()[i]

// fuse_opt_parse's view of the table: "name=" for an option that takes a
// value, "name" for one that does not (both for shape[=RULE]), each keyed
// by its place in the table; then the daemon's flags.
class OptionTemplates {
 public:
  OptionTemplates() {
    const auto& table = MountOptionTable();
    for (size_t i = 0; i < table.size(); ++i) {
      const MountOption& o = table[i];
      if (o.kind == OptionKind::kFlag || o.kind == OptionKind::kFlagOrText) Add(o.name, i);
      if (o.kind != OptionKind::kFlag) Add(o.name + "=", i);
    }
    opts_.reserve(names_.size() + std::size(kFixed) + 1);
    for (size_t i = 0; i < names_.size(); ++i) {
      opts_.push_back(FUSE_OPT_KEY(names_[i].c_str(), static_cast<int>(kKeyTable + keys_[i])));
    }
    for (const fuse_opt& f : kFixed) opts_.push_back(f);
    opts_.push_back(FUSE_OPT_END);
  }
  const fuse_opt* get() const { return opts_.data(); }

 private:
  void Add(std::string name, size_t key) {
    names_.push_back(std::move(name));
    keys_.push_back(key);
  }
  static constexpr fuse_opt kFixed[] = {
      // Options mount(8) passes from fstab that libfuse 3.14 refuses and
      // that mean nothing for kvfs, so they are dropped.
      FUSE_OPT_KEY("norelatime", FUSE_OPT_KEY_DISCARD),
      FUSE_OPT_KEY("nostrictatime", FUSE_OPT_KEY_DISCARD),
      FUSE_OPT_KEY("diratime", FUSE_OPT_KEY_DISCARD),
      FUSE_OPT_KEY("nodiratime", FUSE_OPT_KEY_DISCARD),
      FUSE_OPT_KEY("lazytime", FUSE_OPT_KEY_DISCARD),
      FUSE_OPT_KEY("nolazytime", FUSE_OPT_KEY_DISCARD),
      FUSE_OPT_KEY("iversion", FUSE_OPT_KEY_DISCARD),
      FUSE_OPT_KEY("noiversion", FUSE_OPT_KEY_DISCARD),
      FUSE_OPT_KEY("mand", FUSE_OPT_KEY_DISCARD),
      FUSE_OPT_KEY("nomand", FUSE_OPT_KEY_DISCARD),
      FUSE_OPT_KEY("-f", kKeyForeground),
      FUSE_OPT_KEY("-d", kKeyDebug),
      FUSE_OPT_KEY("debug", kKeyDebug),
      FUSE_OPT_KEY("-h", kKeyHelp),
      FUSE_OPT_KEY("--help", kKeyHelp),
      FUSE_OPT_KEY("-V", kKeyVersion),
      FUSE_OPT_KEY("--version", kKeyVersion),
      FUSE_OPT_KEY("--options-json", kKeyJson),
  };
  std::vector<std::string> names_;
  std::vector<size_t> keys_;
  std::vector<fuse_opt> opts_;
};

// Returns 0 to consume an argument, 1 to pass it on to libfuse, -1 to stop
// at a bad value (p.error says why).
int ProcessArg(void* data, const char* arg, int key, fuse_args* /*outargs*/) {
  Parsed& parsed = *static_cast<Parsed*>(data);
  CommandLine& p = parsed.line;
  switch (key) {
    case FUSE_OPT_KEY_NONOPT:
      p.positional.emplace_back(arg);
      return 0;
    case kKeyForeground:
      p.foreground = true;
      return 0;
    case kKeyDebug:  // libfuse's own debug output needs a terminal
      p.foreground = true;
      return 1;
    case kKeyHelp:
      p.show_help = true;
      return 0;
    case kKeyVersion:
      p.show_version = true;
      return 0;
    case kKeyJson:
      p.show_json = true;
      return 0;
    default:
      break;
  }
  const auto& table = MountOptionTable();
  if (key < kKeyTable || static_cast<size_t>(key - kKeyTable) >= table.size()) return 1;
  const MountOption& o = table[key - kKeyTable];
  std::optional<std::string_view> value;
  if (const char* eq = std::strchr(arg, '='); eq != nullptr) value = eq + 1;
  if (Status st = o.set(p.options, value); !st.ok()) {
    parsed.error = st;
    return -1;
  }
  return o.to_libfuse ? 1 : 0;
}

}  // namespace

Result<CommandLine> ParseCommandLine(fuse_args* args) {
  Parsed p;
  const OptionTemplates templates;
  if (fuse_opt_parse(args, &p, templates.get(), ProcessArg) != 0) {
    if (!p.error.ok()) return p.error;
    return Status::Error(EINVAL, "bad options (try kvfs --help)");
  }
  return std::move(p.line);
}

std::string Usage() {
  return std::string(kUsageHead) + kvfs::daemon::MountOptionsUsage() + kUsageTail;
}

}  // namespace kvfs::daemon
