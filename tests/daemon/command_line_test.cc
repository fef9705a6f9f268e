#include "daemon/command_line.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvfs::daemon {
namespace {

// Parses `argv`; *left gets what stays for libfuse (past argv[0]).
Result<CommandLine> Parse(std::vector<std::string> argv, std::vector<std::string>* left) {
  std::vector<char*> ptrs;
  for (auto& a : argv) ptrs.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(ptrs.size()), ptrs.data());
  auto r = ParseCommandLine(&args);
  left->assign(args.argv + 1, args.argv + args.argc);
  fuse_opt_free_args(&args);
  return r;
}

TEST(CommandLine, TakesKvfsOptionsAndLeavesTheRestForLibfuse) {
  std::vector<std::string> left;
  auto r = Parse({"kvfs", "-f", "-o", "dirty_mb=64,ro,allow_other,lazytime", "-o",
                  "shape,transport=dev", "img", "mnt"},
                 &left);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->foreground);
  EXPECT_EQ(r->positional, (std::vector<std::string>{"img", "mnt"}));
  EXPECT_EQ(r->options.volume.engine.staging_pool_bytes, 64u << 20);
  EXPECT_TRUE(r->options.volume.read_only);
  EXPECT_EQ(r->options.faults.shape, "");
  EXPECT_EQ(r->options.mount.transport, fuse::Transport::kDev);
  // ro for the kernel too, allow_other is libfuse's, lazytime is dropped.
  EXPECT_EQ(left, (std::vector<std::string>{"-o", "ro,allow_other"}));
}

TEST(CommandLine, ALaterValueWins) {
  std::vector<std::string> left;
  auto r = Parse({"kvfs", "-o", "cache_mb=1,ro", "-o", "cache_mb=2,rw", "img", "mnt"}, &left);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->options.fs.cache_bytes, 2u << 20);
  EXPECT_FALSE(r->options.volume.read_only);
  EXPECT_FALSE(r->foreground);
}

TEST(CommandLine, ABadValueIsTheError) {
  std::vector<std::string> left;
  auto r = Parse({"kvfs", "-o", "max_request_mb=32", "img", "mnt"}, &left);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().context(), "max_request_mb=32: must be 1 to 16");
}

TEST(CommandLine, FlagsOfTheDaemon) {
  std::vector<std::string> left;
  auto r = Parse({"kvfs", "--options-json", "-d"}, &left);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->show_json);
  EXPECT_TRUE(r->foreground);  // -d implies -f, and goes on to libfuse
  EXPECT_EQ(left, (std::vector<std::string>{"-d"}));
  EXPECT_NE(Usage().find("kvfs options (-o):\n  index=DIR"), std::string::npos);
}

}  // namespace
}  // namespace kvfs::daemon
