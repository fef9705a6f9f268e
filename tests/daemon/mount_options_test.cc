#include "daemon/mount_options.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <string>

namespace kvfs::daemon {
namespace {

Status Set(DaemonOptions& o, const std::string& name, std::optional<std::string_view> value) {
  const MountOption* opt = FindMountOption(name);
  if (opt == nullptr) return Status::Error(ENOENT, name);
  return opt->set(o, value);
}

std::string Default(const std::string& name) {
  const MountOption* opt = FindMountOption(name);
  EXPECT_NE(opt, nullptr) << name;
  return opt ? opt->get(DaemonOptions{}) : "";
}

TEST(MountOptions, DefaultsAreTheLibraryStructs) {
  EXPECT_EQ(Default("cache_mb"), std::to_string(fs::FileSystemOptions{}.cache_bytes >> 20));
  EXPECT_EQ(Default("dirty_mb"),
            std::to_string(device::IoEngineOptions{}.staging_pool_bytes >> 20));
  EXPECT_EQ(Default("max_threads"), std::to_string(fuse::MountOptions{}.max_threads));
  EXPECT_EQ(Default("evict_min_age"),
            std::to_string(fs::EvictionOptions{}.min_age_ns / 1'000'000'000));
  EXPECT_EQ(Default("evict_wait_ms"),
            std::to_string(fs::EvictionOptions{}.writer_wait.count()));
  EXPECT_EQ(Default("atime_flush_s"),
            std::to_string(fs::FileSystemOptions{}.atime_flush_ms / 1000));
  EXPECT_EQ(Default("prefetch"), "lookup");
  EXPECT_EQ(Default("transport"), "auto");
  EXPECT_EQ(Default("entry_timeout"), "10");
  EXPECT_EQ(Default("relatime"), "on");
  EXPECT_EQ(Default("noatime"), "off");
  EXPECT_EQ(Default("rw"), "on");
  EXPECT_EQ(Default("ro"), "off");
  EXPECT_EQ(Default("log"), "syslog");
  EXPECT_EQ(Default("index"), "");
}

TEST(MountOptions, ValuesLandInTheStructThatOwnsThem) {
  DaemonOptions o;
  ASSERT_TRUE(Set(o, "dirty_mb", "300").ok());
  EXPECT_EQ(o.volume.engine.staging_pool_bytes, 300ull << 20);
  ASSERT_TRUE(Set(o, "max_request_mb", "4").ok());
  EXPECT_EQ(o.mount.max_request, 4u << 20);
  ASSERT_TRUE(Set(o, "lane_write", "7").ok());
  EXPECT_EQ(o.fs.lane_commands[io::LaneIndex(io::Lane::kWrite)], 7u);
  ASSERT_TRUE(Set(o, "evict_wait_ms", "15").ok());
  EXPECT_EQ(o.fs.eviction.writer_wait.count(), 15);
  ASSERT_TRUE(Set(o, "attr_timeout", "0.5").ok());
  EXPECT_EQ(o.mount.timeouts.attr_s, 0.5);
  ASSERT_TRUE(Set(o, "noatime", std::nullopt).ok());
  EXPECT_EQ(o.fs.atime, fs::AtimeMode::kNoatime);
  ASSERT_TRUE(Set(o, "shape", std::nullopt).ok());
  EXPECT_EQ(o.faults.shape, "");
  ASSERT_TRUE(Set(o, "log_level", "warn").ok());
  EXPECT_EQ(o.log.level, spdlog::level::warn);
}

TEST(MountOptions, AliasesAreTakenAndNeverShown) {
  DaemonOptions o;
  ASSERT_TRUE(Set(o, "transport", "io_uring").ok());
  EXPECT_EQ(o.mount.transport, fuse::Transport::kUring);
  EXPECT_EQ(FindMountOption("transport")->get(o), "uring");
  EXPECT_EQ(FindMountOption("transport")->value, "auto|uring|dev");
  ASSERT_TRUE(Set(o, "passthrough", "off").ok());
  ASSERT_TRUE(Set(o, "passthrough", "on").ok());
  EXPECT_EQ(o.mount.passthrough, fuse::PassthroughMode::kAuto);
}

TEST(MountOptions, BadValuesAreRefusedNamingTheOption) {
  for (auto [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"uring_entries", "0"}, {"uring_entries", "1025"}, {"dirty_mb", "0"},
           {"dirty_mb", "-1"}, {"dirty_mb", "1x"}, {"dirty_mb", ""}, {"rings", "99999999999"},
           {"atime_flush_s", "86401"}, {"evict_high", "101"}, {"entry_timeout", "-1"},
           {"entry_timeout", "inf"}, {"prefetch", "always"}, {"verify", "yes"},
           {"log", ""}}) {
    DaemonOptions o;
    Status st = Set(o, name, value);
    EXPECT_EQ(st.code(), EINVAL) << name << "=" << value;
    EXPECT_EQ(st.context().rfind(name + "=" + value + ": ", 0), 0u) << st.context();
  }
}

TEST(MountOptions, EveryShownValueIsTakenBack) {
  // What --help and --options-json print as a default is a value -o
  // accepts, and it gives the same setting.
  const DaemonOptions defaults;
  for (const MountOption& opt : MountOptionTable()) {
    const std::string def = opt.get(defaults);
    if (opt.kind != OptionKind::kUnsigned && opt.kind != OptionKind::kNumber &&
        opt.kind != OptionKind::kChoice && opt.kind != OptionKind::kText) {
      continue;  // a flag shows on or off
    }
    if (def.empty()) continue;
    DaemonOptions o;
    ASSERT_TRUE(opt.set(o, def).ok()) << opt.name << "=" << def;
    EXPECT_EQ(opt.get(o), def) << opt.name;
  }
}

TEST(MountOptions, UsageAndJsonListEveryOptionOnce) {
  std::set<std::string> names;
  const std::string usage = "\n" + MountOptionsUsage();
  for (const MountOption& opt : MountOptionTable()) {
    EXPECT_TRUE(names.insert(opt.name).second) << opt.name << " twice";
    EXPECT_NE(usage.find("\n  " + opt.name), std::string::npos) << opt.name;
    EXPECT_FALSE(opt.help.empty()) << opt.name;
  }
  auto json = nlohmann::json::parse(MountOptionsJson());
  ASSERT_EQ(json.size(), names.size());
  for (const auto& e : json) {
    EXPECT_EQ(names.count(e["name"].get<std::string>()), 1u);
    EXPECT_EQ(e["default"], FindMountOption(e["name"].get<std::string>())->get(DaemonOptions{}));
  }
  // Wrapped at 80 columns: compared with the line breaks taken out.
  std::string flat;
  for (char c : usage) {
    if (c != ' ' && c != '\n') {
      flat += c;
    } else if (!flat.empty() && flat.back() != ' ') {
      flat += ' ';
    }
  }
  for (const auto& text : {"uring_entries=N io_uring transport: requests in flight per CPU "
                           "(default 64; 1 to 1024)",
                           "relatime when", "or a day old (default) strictatime"}) {
    EXPECT_NE(flat.find(text), std::string::npos) << text << "\n" << flat;
  }
}

TEST(MountOptions, FinishChecksAcrossOptionsAndFillsInReadOnly) {
  DaemonOptions o;
  ASSERT_TRUE(Set(o, "evict_low", "95").ok());
  Status st = FinishMountOptions(o);
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_NE(st.context().find("evict_high"), std::string::npos);
  DaemonOptions r;
  ASSERT_TRUE(Set(r, "ro", std::nullopt).ok());
  ASSERT_TRUE(FinishMountOptions(r).ok());
  EXPECT_TRUE(r.fs.read_only);
  EXPECT_TRUE(r.volume.shared_lock);
}

}  // namespace
}  // namespace kvfs::daemon
